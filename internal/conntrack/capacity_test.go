package conntrack

import (
	"io"
	"net"
	"testing"

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

// TestRingBytes: the closed-event ring holds one event per table entry,
// rounded up to a power of two, between 4 MiB and 256 MiB.
func TestRingBytes(t *testing.T) {
	for _, c := range []struct {
		n    int
		want uint32
	}{
		{1, 4 << 20}, {16, 4 << 20}, {32768, 4 << 20}, {32769, 8 << 20},
		{65536, 8 << 20}, {DefaultMaxConnections, 32 << 20}, {MaxMaxConnections, 256 << 20},
	} {
		if got := ringBytes(c.n); got != c.want {
			t.Errorf("ringBytes(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	for _, n := range []int{0, -1, MaxMaxConnections + 1} {
		if ValidMaxConnections(n) == nil {
			t.Errorf("ValidMaxConnections(%d) accepted", n)
		}
	}
}
