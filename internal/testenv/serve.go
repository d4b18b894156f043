// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"net"
	"testing"
)

// ServeTCP listens on addr inside the peer's namespace and runs handle on
// each accepted connection, closing it afterwards, until the test ends.
func (p *Peer) ServeTCP(t testing.TB, addr string, handle func(net.Conn)) *net.TCPListener {
	t.Helper()
	var l net.Listener
	if err := p.Do(func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, p.Name, err)
	}
	return serve(t, l, handle)
}

// ServeLoopbackTCP is ServeTCP on 127.0.0.1 in our own namespace, with a
// port of the kernel's choosing.
func ServeLoopbackTCP(t testing.TB, handle func(net.Conn)) *net.TCPListener {
	t.Helper()
	return ServeLocalTCP(t, "127.0.0.1:0", handle)
}

// ServeLocalTCP is ServeLoopbackTCP on addr (such as [::1]:0), an address
// of this namespace (127.0.0.0/8 is all loopback).
func ServeLocalTCP(t testing.TB, addr string, handle func(net.Conn)) *net.TCPListener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, l, handle)
}

func serve(t testing.TB, l net.Listener, handle func(net.Conn)) *net.TCPListener {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return l.(*net.TCPListener)
}

// FreeLoopbackAddr returns a 127.0.0.1 address with a port nobody listened
// on a moment ago, for a server the test starts in another process.
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
