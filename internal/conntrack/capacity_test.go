package conntrack

import (
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestMapFull: with room for 16 sockets, 64 connections (128 sockets, both
// ends on this host) overflow the kernel's table: the overflow is counted
// in MapFull and at most 16 of them are tracked. With the default capacity
// the same traffic is tracked whole and nothing is counted.
func TestMapFull(t *testing.T) {
	const conns, tiny = 64, 16
	p := testenv.NewPeer(t, "stk-cap", 240)
	l := p.ServeTCP(t, addrPort(p.PeerIP4, 0), func(c net.Conn) {
		_, _ = c.Write([]byte{1})
		_, _ = io.Copy(io.Discard, c)
	})
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	ours := func(r *conn.Record) bool {
		return r.State != "LISTEN" && ((r.RemotePort == port && r.RemoteAddr == p.PeerIP4) ||
			(r.LocalPort == port && r.LocalAddr == p.PeerIP4))
	}
	// open makes the connections, each with one byte each way, and holds
	// them until the subtest ends.
	open := func(t *testing.T) {
		for range conns {
			c, err := net.Dial("tcp", addrPort(p.PeerIP4, int(port)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if _, err := c.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("tiny", func(t *testing.T) {
		tr := openTracker(t, Config{MaxConnections: tiny})
		open(t)
		// Every socket that found the table full was counted at least
		// once (its first event), whatever else filled the table.
		h := poll(t, tr, func(h *history) bool { return h.last.MapFull >= 2*conns-tiny })
		if n := len(find(h.last.Records, ours)); n > tiny {
			t.Errorf("%d of our sockets tracked in a table of %d", n, tiny)
		}
		t.Logf("map full %d, lost %d, %d of our %d sockets tracked",
			h.last.MapFull, h.last.Lost, len(find(h.last.Records, ours)), 2*conns)
	})

	t.Run("default", func(t *testing.T) {
		tr := openTracker(t, Config{})
		open(t)
		h := poll(t, tr, func(h *history) bool { return len(find(h.last.Records, ours)) == 2*conns })
		if h.last.MapFull != 0 {
			t.Errorf("map full %d with room for %d sockets", h.last.MapFull, DefaultMaxConnections)
		}
	})
}

// TestClosedBeyondLimit: the tracker holds at most MaxConnections closed
// events between two snapshots; 100 connections closing (200 sockets)
// between two snapshots with room for 64 are reported as 64 closed records,
// the rest as lost, not as unbounded memory. (A 5.10 guest had 195 of the
// 200 closes within 10 s, so the wait is for 100 over the limit.)
func TestClosedBeyondLimit(t *testing.T) {
	const n, limit = 100, 64
	p := testenv.NewPeer(t, "stk-limit", 241)
	tr := openTracker(t, Config{MaxConnections: limit})
	l := tcpServer(t, p, addrPort(p.PeerIP4, 0), 1, 0)
	if _, err := tr.Snapshot(); err != nil {
		t.Fatal(err)
	}
	runHelperProc(t, "tcp", "STC_ADDR="+addrPort(p.PeerIP4, l.Addr().(*net.TCPAddr).Port), "STC_SEND=1",
		"STC_RECV=0", "STC_COUNT="+strconv.Itoa(n))
	deadline := time.Now().Add(10 * time.Second)
	for tr.closed.lost.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d closed events over the limit after 10s, want %d", tr.closed.lost.Load(), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	closed := find(s.Records, func(r *conn.Record) bool { return r.Event == conn.Closed })
	if len(closed) != limit || s.Lost < n {
		t.Errorf("%d closed records, lost %d; want %d, at least %d", len(closed), s.Lost, limit, n)
	}
}

func TestValidMaxConnections(t *testing.T) {
	for _, n := range []int{0, -1, MaxMaxConnections + 1} {
		if ValidMaxConnections(n) == nil {
			t.Errorf("ValidMaxConnections(%d) accepted", n)
		}
	}
	for _, n := range []int{MinMaxConnections, DefaultMaxConnections, MaxMaxConnections} {
		if err := ValidMaxConnections(n); err != nil {
			t.Errorf("ValidMaxConnections(%d): %v", n, err)
		}
	}
}
