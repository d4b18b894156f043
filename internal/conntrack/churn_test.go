// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestOwnersUnderChurn: connections made one after another, each by a
// thread renamed for it, while snapshots are taken every 100ms. Each is
// reported closed exactly once, with its thread's name and its bytes, and
// no record of the server's port is ever partial or without an owner.
//
// The 7.2 guest once broke this: a state program preempted
// between putting a new entry into the table and owning it let user space
// read the entry half-built, and conns_owners (which runs while accepted
// sockets wait for their owner) give a connecting socket the name of the
// process rather than of its thread.
func TestOwnersUnderChurn(t *testing.T) {
	const n, payload = 1000, 10
	tr := openTracker(t, Config{})
	l := testenv.ServeLoopbackTCP(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	srv := uint16(l.Addr().(*net.TCPAddr).Port)
	dialed := make(chan error, 1)
	go func() { dialed <- testenv.DialNamed(l.Addr().String(), "stc-", n, payload) }()
	isClient := func(r *conn.Record) bool { return r.RemotePort == srv && r.Event == conn.Closed }
	isServer := func(r *conn.Record) bool {
		return r.LocalPort == srv && r.State != "LISTEN" && r.Event == conn.Closed
	}
	finished := false
	h := poll(t, tr, func(h *history) bool {
		if !finished {
			select {
			case err := <-dialed:
				if err != nil {
					t.Fatal(err)
				}
				finished = true
			default:
			}
		}
		return finished && len(find(h.seen, isClient)) >= n && len(find(h.seen, isServer)) >= n
	})
	var wrong []string
	for _, r := range h.seen {
		if (r.LocalPort == srv || r.RemotePort == srv) && (r.Partial || r.PID == 0 || r.Comm == "") {
			wrong = append(wrong, fmt.Sprintf("partial or ownerless: %+v", r))
		}
	}
	// By name, which is what is checked: a connection's kernel key is not
	// its cookie everywhere (before 5.12 it may be its address).
	byName := map[string][]conn.Record{}
	for _, r := range find(h.seen, isClient) {
		byName[r.Comm] = append(byName[r.Comm], r)
	}
	for i := range n {
		name := fmt.Sprintf("stc-%05d", i)
		rs := byName[name]
		if len(rs) != 1 || rs[0].BytesOut != payload || rs[0].BytesIn != 0 {
			wrong = append(wrong, fmt.Sprintf("connection %d: want one closed record of %s with bytes in/out 0/%d, got:\n%s",
				i, name, payload, dump(rs)))
		}
		delete(byName, name)
	}
	for name, rs := range byName {
		wrong = append(wrong, fmt.Sprintf("closed client records of %q, which made no connection:\n%s", name, dump(rs)))
	}
	if servers := find(h.seen, isServer); len(servers) != n {
		wrong = append(wrong, fmt.Sprintf("%d server ends closed, want %d", len(servers), n))
	} else if short := find(servers, func(r *conn.Record) bool { return r.BytesIn != payload }); len(short) > 0 {
		wrong = append(wrong, "server ends without their bytes:\n"+dump(short))
	}
	testenv.RequireExact(t, wrong, h.last.Lost)
}

// TestUDPFlowsUnderChurn: UDP sockets made one after another, each sending
// one datagram to a server socket, while snapshots are taken every 100ms and
// flows expire after 200ms of silence. Every flow has its owner, none is
// reported closed empty, and the closed flows' bytes add up to what was sent
// and what was read.
//
// A flow was put into the table before its program counted the datagram and
// stamped its time: user space reading it in between (on 7.x a program can
// be preempted halfway) took it for one idle since boot, reported it closed
// with nothing and deleted it, and the datagram was lost.
func TestUDPFlowsUnderChurn(t *testing.T) {
	const n, payload = 1000, 10
	tr := openTracker(t, Config{UDPIdle: 200 * time.Millisecond})
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	to := srv.LocalAddr().(*net.UDPAddr)
	port := uint16(to.Port)
	sent := make(chan error, 1)
	go func() {
		for range n {
			c, err := net.DialUDP("udp4", nil, to)
			if err != nil {
				sent <- err
				return
			}
			_, err = c.Write(make([]byte, payload))
			c.Close()
			if err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	// Read until nothing more comes: a datagram the receive buffer had no
	// room for is the socket's drop, not ours to count as received.
	read := 0
	buf := make([]byte, 64)
	for {
		srv.SetReadDeadline(time.Now().Add(time.Second))
		k, _, err := srv.ReadFromUDP(buf)
		if err != nil {
			break
		}
		read += k
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	isClient := func(r *conn.Record) bool { return r.Proto == "udp" && r.RemotePort == port }
	isServer := func(r *conn.Record) bool { return r.Proto == "udp" && r.LocalPort == port }
	sum := func(rs []conn.Record, bytes func(*conn.Record) uint64) (total uint64) {
		for i := range rs {
			total += bytes(&rs[i])
		}
		return total
	}
	out := func(r *conn.Record) uint64 { return r.BytesOut }
	in := func(r *conn.Record) uint64 { return r.BytesIn }
	h := poll(t, tr, func(h *history) bool {
		return sum(find(h.closed, isClient), out) >= n*payload && sum(find(h.closed, isServer), in) >= uint64(read) &&
			len(find(h.last.Records, func(r *conn.Record) bool { return isClient(r) || isServer(r) })) == 0
	})
	var wrong []string
	for _, r := range h.seen {
		if (isClient(&r) || isServer(&r)) && (r.PID == 0 || r.Event == conn.Closed && r.BytesIn+r.BytesOut+r.DropsIn == 0) {
			wrong = append(wrong, fmt.Sprintf("ownerless or closed empty: %+v", r))
		}
	}
	if got := sum(find(h.closed, isClient), out); got != n*payload {
		wrong = append(wrong, fmt.Sprintf("client flows closed with %d bytes out, want %d", got, n*payload))
	}
	// Where the kernel cannot say which datagram the socket refused (the
	// cgroup_skb path before 6.10), a dropped one stays counted as
	// received: TestUDPReceiveDrops holds drops exact where they can be.
	if got := sum(find(h.closed, isServer), in); got < uint64(read) || got > n*payload {
		wrong = append(wrong, fmt.Sprintf("server flows closed with %d bytes in, want from the %d read to the %d sent", got, read, n*payload))
	}
	t.Logf("%d of %d bytes read", read, n*payload)
	testenv.RequireExact(t, wrong, h.last.Lost)
}
