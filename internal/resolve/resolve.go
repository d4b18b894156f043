// SPDX-License-Identifier: Apache-2.0

// Package resolve names what the connection views show by number: remote
// addresses by the system resolver (/etc/hosts, then DNS, as
// /etc/nsswitch.conf's "files dns" does), looked up in the background so
// a refresh never waits for one, and ports by /etc/services.
package resolve

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Bounds of the cache and of the work done for it. Go's resolver does not
// expose a record's TTL, so a name is kept for a fixed time; a failure for
// a shorter one, so a peer whose PTR record appears is named soon after.
const (
	DefaultTTL         = 5 * time.Minute
	DefaultFailureTTL  = time.Minute
	DefaultMaxEntries  = 65536
	DefaultMaxInFlight = 8
	lookupTimeout      = 5 * time.Second
)

// Names names remote addresses. Its methods are safe for concurrent use.
type Names struct {
	lookup      func(ctx context.Context, addr string) ([]string, error)
	ttl, failed time.Duration
	maxEntries  int
	inFlight    chan struct{} // a slot per lookup running
	now         func() time.Time

	mu    sync.Mutex
	cache map[netip.Addr]entry
}

type entry struct {
	name    string // "" while the lookup runs or when it found none
	expires time.Time
	pending bool
}

// New returns a resolver using Go's own (pure Go) resolver, with the
// default bounds.
func New() *Names {
	r := &net.Resolver{PreferGo: true}
	return newNames(r.LookupAddr, DefaultMaxInFlight)
}

func newNames(lookup func(context.Context, string) ([]string, error), maxInFlight int) *Names {
	return &Names{lookup: lookup, ttl: DefaultTTL, failed: DefaultFailureTTL, maxEntries: DefaultMaxEntries,
		inFlight: make(chan struct{}, maxInFlight), now: time.Now, cache: make(map[netip.Addr]entry)}
}

// Name returns a's name if it is known, else "" at once: an address not
// looked up yet (or whose name expired) starts a lookup in the background
// when fewer than the bound are running, and a later call sees its answer.
func (n *Names) Name(a netip.Addr) string {
	a = a.Unmap()
	if !a.IsValid() || a.IsUnspecified() {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.cache[a]
	if ok && (e.pending || n.now().Before(e.expires)) {
		return e.name
	}
	select {
	case n.inFlight <- struct{}{}:
	default:
		return e.name // all slots busy: a later refresh asks again
	}
	if !ok && len(n.cache) >= n.maxEntries {
		n.evict()
	}
	n.cache[a] = entry{name: e.name, pending: true} // an expired name stays shown until its successor arrives
	go n.resolve(a)
	return e.name
}

func (n *Names) resolve(a netip.Addr) {
	defer func() { <-n.inFlight }()
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	names, err := n.lookup(ctx, a.String())
	e := entry{expires: n.now().Add(n.failed)}
	if err == nil && len(names) > 0 {
		e = entry{name: strings.TrimSuffix(names[0], "."), expires: n.now().Add(n.ttl)}
	}
	n.mu.Lock()
	n.cache[a] = e
	n.mu.Unlock()
}

// evict makes room: expired entries go first; if none has expired, an
// arbitrary settled one (a lookup still running keeps its entry).
func (n *Names) evict() {
	now := n.now()
	var victim netip.Addr
	for a, e := range n.cache {
		if e.pending {
			continue
		}
		if !now.Before(e.expires) {
			delete(n.cache, a)
			return
		}
		victim = a
	}
	delete(n.cache, victim)
}
