// SPDX-License-Identifier: Apache-2.0

package promweb

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// connLimit bounds the connections the server holds. At the limit a new
// connection evicts the one that has waited longest without being served: a
// connection idle before its first or next request, or one whose request the
// server is done with or never handed to a handler of ours (refused for
// want of credentials, then held while the server reads a body it does not
// need). Only when every connection is inside a handler is the new one
// refused. Such connections cost a client nothing to open, so they must not
// be able to crowd out a scrape: a scraper whose connection was evicted
// simply reconnects.
type connLimit struct {
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connState // by the accepted (TCP) connection

	closed *prometheus.CounterVec // by reason: evicted, refused
}

type connState struct {
	busy  bool      // inside a handler (serving)
	since time.Time // accepted, or last went idle
}

func newConnLimit(max int) *connLimit {
	return &connLimit{
		max:   max,
		conns: map[net.Conn]*connState{},
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stacktop_http_connections_closed_total",
			Help: "HTTP connections closed by the --web.max-connections limit: evicted (idle, to admit a new one) or refused (every connection was busy).",
		}, []string{"reason"}),
	}
}

// Describe sends the descriptors of the metrics the server itself exports
// (beside the registry it serves), for the documentation check.
func Describe(ch chan<- *prometheus.Desc) { newConnLimit(1).closed.Describe(ch) }

// listener wraps l so that every accepted connection passes admit.
func (cl *connLimit) listener(l net.Listener) net.Listener { return limitedListener{l, cl} }

type limitedListener struct {
	net.Listener
	limit *connLimit
}

func (l limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.limit.admit(c) {
			return c, nil
		}
		c.Close()
	}
}

func (cl *connLimit) admit(c net.Conn) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if len(cl.conns) >= cl.max {
		var victim net.Conn
		var oldest time.Time
		for vc, s := range cl.conns {
			if !s.busy && (victim == nil || s.since.Before(oldest)) {
				victim, oldest = vc, s.since
			}
		}
		if victim == nil {
			cl.closed.WithLabelValues("refused").Inc()
			return false
		}
		delete(cl.conns, victim)
		victim.Close() // its server goroutine sees the error and ends
		cl.closed.WithLabelValues("evicted").Inc()
	}
	cl.conns[c] = &connState{since: time.Now()}
	return true
}

// track follows the server's view of each connection (http.Server.ConnState).
func (cl *connLimit) track(c net.Conn, state http.ConnState) {
	c = tcpConn(c)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	s := cl.conns[c]
	if s == nil {
		return // evicted already
	}
	switch state {
	case http.StateIdle:
		s.since = time.Now()
	case http.StateClosed, http.StateHijacked:
		delete(cl.conns, c)
	}
}

// tcpConn returns the accepted connection under c (TLS).
func tcpConn(c net.Conn) net.Conn {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		return tc.NetConn()
	}
	return c
}

type connContextKey struct{}

// withConn keeps the connection in its requests' context
// (http.Server.ConnContext), for serving.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connContextKey{}, tcpConn(c))
}

// serving marks a request's connection busy while next serves it, so that
// it cannot be evicted meanwhile. It wraps the handlers that the
// authentication in front of them let through.
func (cl *connLimit) serving(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connContextKey{}).(net.Conn)
		cl.setBusy(c, true)
		defer cl.setBusy(c, false)
		next.ServeHTTP(w, r)
	})
}

func (cl *connLimit) setBusy(c net.Conn, busy bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if s := cl.conns[c]; s != nil {
		s.busy = busy
	}
}

// open returns how many connections are held.
func (cl *connLimit) open() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return len(cl.conns)
}
