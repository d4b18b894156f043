// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/testenv"
)

// drainSlow returns every slow event the kernel queued so far.
func drainSlow(t *testing.T, tr *Tracer) []SlowEvent {
	t.Helper()
	if err := tr.FlushSlow(); err != nil {
		t.Fatal(err)
	}
	var out []SlowEvent
	for {
		ev, err := tr.ReadSlow()
		if errors.Is(err, ErrSlowFlushed) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

// slowDrops reads the tracer's drop counters.
func slowDrops(t *testing.T, tr *Tracer) SlowDrops {
	t.Helper()
	d, err := tr.SlowDrops()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// ourComm is the name the kernel gives this test binary's threads.
func ourComm() string {
	comm := filepath.Base(os.Args[0])
	return comm[:min(len(comm), 15)] // TASK_COMM_LEN - 1
}

func addrPort(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

// unmapped is addr with an IPv4 address as such: Go's sockets report IPv4 in
// the 16-byte mapped form.
func unmapped(addr net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := addr.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// TestSlowEventsNameTheWaitingConnection: a reader that sleeps 300 ms before
// each read and one that reads at once, from two TCP connections of the
// same peer (IPv4 and IPv6) and a UDP socket read late. With a threshold of
// 150 ms each late read is one event at its socket-read probe naming the
// connection, our pid, comm, cgroup, the interface and namespace; the
// prompt connection gives none, and no event is at or below the threshold.
func TestSlowEventsNameTheWaitingConnection(t *testing.T) {
	p := testenv.NewPeer(t, "stl-slow", 20)
	const threshold, late, n = 150 * time.Millisecond, 300 * time.Millisecond, 3
	tr := start(t, Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(p.HostIndex)}, Slow: threshold})
	waitForStamps(t, tr, p)
	own, err := ownNetns()
	if err != nil {
		t.Fatal(err)
	}
	drainSlow(t, tr) // whatever the stamps' start-up left

	slowOurs, slowPeers := p.TCPFromPeer(t, testenv.V4)
	fastOurs, fastPeers := p.TCPFromPeer(t, testenv.V6)
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.HostIP4, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	udpPeer := p.DialUDP(t, udp.LocalAddr().(*net.UDPAddr))
	for range n {
		testenv.Exchange(t, fastOurs, fastPeers, 0)
		testenv.Exchange(t, slowOurs, slowPeers, late)
		if _, err := udpPeer.Write([]byte("datagram")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(late)
		if _, err := udp.Read(make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
	}
	events := drainSlow(t, tr)

	slowLocal, slowRemote := unmapped(slowOurs.LocalAddr()), unmapped(slowOurs.RemoteAddr())
	fastLocal, udpLocal := unmapped(fastOurs.LocalAddr()), unmapped(udp.LocalAddr())
	var tcpReads, udpReads int
	for _, ev := range events {
		local, remote := addrPort(ev.LocalAddr, ev.LocalPort), addrPort(ev.RemoteAddr, ev.RemotePort)
		if ev.LatencyNS <= uint64(threshold) {
			t.Errorf("an event at or below the threshold: %+v", ev)
		}
		if local.Port() == fastLocal.Port() || remote.Port() == fastLocal.Port() {
			t.Errorf("an event of the prompt connection: %+v", ev)
		}
		if ev.Event != "slow" || ev.Iface != p.HostIf || ev.Netns != uint32(own) {
			t.Errorf("event %+v: want event slow, iface %s, netns %d", ev, p.HostIf, own)
		}
		reader := ev.PID == uint32(os.Getpid()) && ev.Comm == ourComm() && ev.Cgroup != ""
		switch {
		case ev.Hook == TCPSocketRead.String() && local == slowLocal:
			tcpReads++
			if remote != slowRemote || ev.Proto != "tcp" || ev.Family != 4 || !reader ||
				ev.LatencyNS < uint64(late) {
				t.Errorf("slow TCP read %+v: want %s > %s, tcp, family 4, pid %d, comm %q, a cgroup, latency >= %v",
					ev, slowLocal, slowRemote, os.Getpid(), ourComm(), late)
			}
			// Local TCP carries a delivery time through ip-start and
			// tcp-start; the enqueue is known where the read names its
			// skb (tracepoint backend: the copied one), not at
			// fentry/tcp_recv_timestamp, which sees only the stamp.
			want := []Hook{TCPSocketEnqueued}
			if backendOf(tr, TCPSocketRead) == features.FentryBE {
				want = nil
			}
			checkEarlier(t, ev, want, threshold)
		case ev.Hook == UDPSocketRead.String() && local == udpLocal:
			udpReads++
			// A datagram from the peer is stamped at netif_rx: every
			// hook on its way saw it.
			checkEarlier(t, ev, []Hook{IPStart, UDPStart, UDPSocketEnqueued}, threshold)
			// The reading socket is not connected: at the read hooks
			// the peer's address is unknown.
			if remote != netip.AddrPortFrom(netip.IPv4Unspecified(), 0) || ev.Proto != "udp" || !reader ||
				ev.LatencyNS < uint64(late) {
				t.Errorf("slow UDP read %+v: want %s > 0.0.0.0:0, udp, pid %d, comm %q, a cgroup, latency >= %v",
					ev, udpLocal, os.Getpid(), ourComm(), late)
			}
		default:
			t.Logf("other slow event: %+v", ev)
		}
	}
	if tcpReads != n || udpReads != n {
		t.Errorf("%d slow TCP reads and %d slow UDP reads reported, want %d each; events %+v", tcpReads, udpReads, n, events)
	}
	if d := slowDrops(t, tr); d != (SlowDrops{}) {
		t.Errorf("drops %+v, want none", d)
	}
}

// checkEarlier: the event names exactly the earlier hooks want, each
// faster than the threshold (the packet waited in the socket), none after
// a later one (the same stamp, later in the stack) nor after the event's.
func checkEarlier(t *testing.T, ev SlowEvent, want []Hook, threshold time.Duration) {
	t.Helper()
	var got []Hook
	var last uint64
	for _, h := range Hooks {
		ns, ok := ev.Earlier[h.String()]
		if !ok {
			continue
		}
		got = append(got, h)
		if ns == 0 || ns >= uint64(threshold) || ns < last || ns > ev.LatencyNS {
			t.Errorf("%s: %s at %v, after %v earlier, before %v at %s", ev.Hook, h, time.Duration(ns),
				time.Duration(last), time.Duration(ev.LatencyNS), ev.Hook)
		}
		last = ns
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s event names earlier hooks %v, want %v: %+v", ev.Hook, got, want, ev)
	}
}

// backendOf is the backend the tracer chose for h.
func backendOf(tr *Tracer, h Hook) features.Backend {
	for _, c := range tr.Choices() {
		if c.Hook == h.String() {
			return c.Backend
		}
	}
	return ""
}

// TestSlowEventsDropsAreCounted: every slow packet is either reported or
// counted, both when --slow-limit holds events back and when the ring
// buffer is full because nobody reads it.
func TestSlowEventsDropsAreCounted(t *testing.T) {
	p := testenv.NewPeer(t, "stl-slowdrop", 21)
	hooks := HookSet(0).With(UDPStart).With(UDPSocketRead)
	// burst queues n datagrams, lets them age past the threshold, then
	// reads them all at once: n slow reads within a few milliseconds.
	burst := func(t *testing.T, n int) {
		srv, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.HostIP4, 0)))
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		c := p.DialUDP(t, srv.LocalAddr().(*net.UDPAddr))
		for range n {
			if _, err := c.Write([]byte("datagram")); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(300 * time.Millisecond)
		buf := make([]byte, 64)
		for i := range n {
			_ = srv.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := srv.Read(buf); err != nil {
				t.Fatalf("datagram %d: %v", i, err)
			}
		}
	}
	reads := func(events []SlowEvent) (n uint64) {
		for _, ev := range events {
			if ev.Hook == UDPSocketRead.String() {
				n++
			}
		}
		return n
	}

	t.Run("limit", func(t *testing.T) {
		const n, limit = 20, 3
		tr := start(t, Config{Hooks: hooks, Ifindexes: []uint32{uint32(p.HostIndex)}, Slow: 100 * time.Millisecond,
			SlowLimit: limit})
		waitForStamps(t, tr, p)
		burst(t, n)
		got, d := reads(drainSlow(t, tr)), slowDrops(t, tr)
		// A burst that straddles a second gets two seconds' budget.
		if got < limit || got > 2*limit || got+d.Limited != n || d.RingFull != 0 {
			t.Errorf("%d reads reported, drops %+v; want %d to %d reported, the rest of %d limited", got, d, limit, 2*limit, n)
		}
	})
	t.Run("ring full", func(t *testing.T) {
		const n = 60 // within udp-socket-read's FIFO: every read is attributed
		tr := start(t, Config{Hooks: hooks, Ifindexes: []uint32{uint32(p.HostIndex)}, Slow: 100 * time.Millisecond,
			slowRingBytes: uint32(os.Getpagesize())})
		waitForStamps(t, tr, p)
		burst(t, n) // nobody reads the ring meanwhile
		got, d := reads(drainSlow(t, tr)), slowDrops(t, tr)
		if d.RingFull == 0 || got+d.RingFull != n || d.Limited != 0 {
			t.Errorf("%d reads reported, drops %+v; want some of %d lost to the full ring, the rest reported", got, d, n)
		}
		t.Logf("a %d-byte ring held %d events", os.Getpagesize(), got)
	})
}

// TestSlowTextEscapesNames: what a local user names (comm, cgroup,
// interface) cannot reach the terminal as control sequences.
func TestSlowTextEscapesNames(t *testing.T) {
	ev := SlowEvent{Event: "slow", TS: time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC), Hook: "tcp-socket-read",
		LatencyNS: 150_000_000, Proto: "tcp", Family: 4, LocalAddr: netip.MustParseAddr("198.18.1.1"), LocalPort: 80,
		RemoteAddr: netip.MustParseAddr("198.18.1.2"), RemotePort: 40000, Iface: "eth\x1b[2J", Netns: 4026531840,
		PID: 42, Comm: "ev\nX\x1b[31m", Cgroup: "/a\rb"}
	var b strings.Builder
	if err := WriteSlowText(&b, ev); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	want := "2026-12-01T19:00:00Z slow tcp-socket-read 150ms tcp 198.18.1.1:80 > 198.18.1.2:40000 iface=eth\\x1b[2J netns=4026531840 pid=42 comm=ev\\nX\\x1b[31m cgroup=/a\\rb\n"
	if got != want {
		t.Errorf("text\n%q\nwant\n%q", got, want)
	}
}
