// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/testenv"
)

// socketReads are the two socket-read hooks, which read wait needs.
var socketReads = HookSet(0).With(TCPSocketRead).With(UDPSocketRead)

// cookie is the kernel's socket cookie of c (SO_COOKIE) as the key of its
// read-wait histogram: its key on kernels with the cookie helper, and after
// the getsockopt on every kernel.
func cookie(t *testing.T, c syscall.Conn) SocketKey {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v uint64
	var serr error
	if err := raw.Control(func(fd uintptr) { v, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("SO_COOKIE: %v", serr)
	}
	return SocketKey{Socket: v}
}

func readWaits(t *testing.T, tr *Tracer) SocketWaits {
	t.Helper()
	w := SocketWaits{}
	if err := tr.ReadWaits(w); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestReadWaitPerSocket: with ReadWait, each socket-read sample also goes
// into its socket's histogram: a TCP and a UDP socket read 120 ms late and a
// TCP socket read at once (from a peer namespace; only our ends read) have
// exactly their reads in their own histograms, in the buckets of those
// waits; the max is the refresh's (0 at the next refresh without reads, the
// counts unchanged); a forgotten socket is gone. Keyed by cookie where
// tracing programs have the cookie helper (5.12+), and as before 5.12 on
// every kernel: TCP by the socket's address, UDP by its cookie.
func TestReadWaitPerSocket(t *testing.T) {
	p := testenv.NewPeer(t, "stl-rwait", 23)
	t.Run("cookie", func(t *testing.T) {
		if !features.SocketCookieTracing() {
			testenv.Unsupported(t, "tracing programs cannot call bpf_get_socket_cookie before 5.12")
		}
		readWaitPerSocket(t, p, Config{Hooks: socketReads, ReadWait: true})
	})
	t.Run("address", func(t *testing.T) {
		readWaitPerSocket(t, p, Config{Hooks: socketReads, ReadWait: true, noCookieHelper: true})
	})
}

func readWaitPerSocket(t *testing.T, p *testenv.Peer, cfg Config) {
	tr := start(t, cfg)
	waitForReadStamps(t, tr, p)
	slow, slowPeer := p.TCPFromPeer(t, testenv.V4)
	fast, fastPeer := p.TCPFromPeer(t, testenv.V6)
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: p.HostIP4.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	// Without the cookie helper a UDP socket is keyed by the cookie
	// conntrack makes at socket(): make it here.
	keys := map[string]SocketKey{"udp": cookie(t, udp)}
	before := readWaits(t, tr) // a refresh ends: what follows is the next one's

	// Different counts, so that without cookies the TCP sockets' histograms
	// (keyed by kernel addresses, which user space cannot see) are told
	// apart by what they hold.
	const nSlow, nFast, nUDP, delay = 4, 7, 5, 120 * time.Millisecond
	sendAndRead(t, slow, slowPeer, nSlow, delay)
	sendAndRead(t, fast, fastPeer, nFast, 0)
	testenv.ReadDatagrams(t, p.DialUDP(t, udp.LocalAddr().(*net.UDPAddr)), udp, nUDP, delay)
	got := readWaits(t, tr)
	// 120 ms lies in (2^26, 2^27] ns: read-wait bucket 27 - 10.
	slowBucket := 27 - hist.WaitFirstSlot
	isSlow := func(d *hist.Wait) bool {
		return sumWait(d, 0, slowBucket-1) == 0 && d.MaxNs >= uint64(delay) && d.SumNs >= d.Count()*uint64(delay)
	}
	isFast := func(d *hist.Wait) bool { return d.Max() < uint64(delay) }
	growth := func(key SocketKey) hist.Wait {
		w, prev := got[key], before[key]
		return w.Since(&prev)
	}
	if cfg.noCookieHelper {
		// Ours are the only histograms new since before with exactly these
		// counts and waits (other processes on the host read too).
		for key := range got {
			if _, old := before[key]; old || key == keys["udp"] {
				continue
			}
			d := growth(key)
			switch {
			case d.Count() == nSlow && isSlow(&d):
				if _, dup := keys["slow"]; dup {
					t.Fatalf("two histograms hold %d reads over %v", nSlow, delay)
				}
				keys["slow"] = key
			case d.Count() == nFast && isFast(&d):
				keys["fast"] = key
			}
		}
	} else {
		keys["slow"], keys["fast"] = cookie(t, slow), cookie(t, fast)
	}
	for name, want := range map[string]uint64{"slow": nSlow, "fast": nFast, "udp": nUDP} {
		key, ok := keys[name]
		if _, in := got[key]; !ok || !in {
			t.Fatalf("%s socket: no histogram (key %+v); have %v", name, key, got)
		}
		d := growth(key)
		if d.Count() != want {
			t.Errorf("%s: %d samples, want %d (%v)", name, d.Count(), want, d.Buckets)
		}
		if name == "fast" && !isFast(&d) || name != "fast" && !isSlow(&d) {
			t.Errorf("%s: max %d ns, sum %d ns: buckets %v", name, d.MaxNs, d.SumNs, d.Buckets)
		}
	}

	again := readWaits(t, tr)
	for name, key := range keys {
		if w := again[key]; w.Buckets != got[key].Buckets || w.SumNs != got[key].SumNs || w.MaxNs != 0 {
			t.Errorf("%s at a refresh without reads: %+v, want the counts of %+v and max 0", name, w, got[key])
		}
	}
	if err := tr.ForgetSockets([]SocketKey{keys["slow"], {Socket: keys["slow"].Socket ^ 1<<62}, keys["fast"]}); err != nil {
		t.Fatalf("forgetting, one key unknown: %v", err)
	}
	left := readWaits(t, tr)
	if _, ok := left[keys["slow"]]; ok {
		t.Error("a forgotten socket is still there")
	}
	if _, ok := left[keys["fast"]]; ok {
		t.Error("a socket after an unknown key in one batch is still there")
	}
	if _, ok := left[keys["udp"]]; !ok {
		t.Error("forgetting others dropped the UDP socket's histogram")
	}
}

// sendAndRead has peers send n 100-byte messages, each read on ours after
// delay before the next is sent: n reads, by ours only.
func sendAndRead(t *testing.T, ours, peers net.Conn, n int, delay time.Duration) {
	t.Helper()
	msg := make([]byte, 100)
	for range n {
		if _, err := peers.Write(msg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		if _, err := io.ReadFull(ours, msg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadWaitOtherNamespace: read wait takes the reads of every
// namespace's sockets, whatever -n selects for the histograms (by default
// ours): a UDP socket and (with the cookie helper, which keys TCP by
// cookie) a TCP socket inside a peer namespace, each read 120 ms late, have
// exactly their reads in their histograms. On the tracepoint backend this
// takes tp_sk_data_ready and tp_skb_copy_datagram_iovec past their early
// exit for another namespace's socket. The socket-read histograms, ours
// only, gain fewer than those reads in their bucket (other processes of
// our namespace may read that late too; without the filter all of ours
// would be there).
func TestReadWaitOtherNamespace(t *testing.T) {
	p := testenv.NewPeer(t, "stl-rwns", 27)
	tr := start(t, Config{Hooks: socketReads, ReadWait: true})
	waitForReadStamps(t, tr, p)
	var udp *net.UDPConn
	if err := p.Do(func() (err error) {
		udp, err = net.ListenUDP("udp", &net.UDPAddr{IP: p.PeerIP4.AsSlice()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	keys := map[string]SocketKey{"udp": cookie(t, udp)}
	tcp := features.SocketCookieTracing()
	var ours, peers *net.TCPConn
	if tcp {
		ours, peers = p.TCPFromPeer(t, testenv.V4)
		keys["tcp"] = cookie(t, peers)
	}
	before, hBefore := readWaits(t, tr), totals(t, tr)

	const n, delay = 5, 120 * time.Millisecond
	if tcp {
		sendAndRead(t, peers, ours, n, delay) // the peer's end reads
	}
	sender, err := net.DialUDP("udp", nil, udp.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	testenv.ReadDatagrams(t, sender, udp, n, delay)

	got, hAfter := readWaits(t, tr), totals(t, tr)
	slowBucket := 27 - hist.WaitFirstSlot // 120 ms lies in (2^26, 2^27] ns
	for name, key := range keys {
		w, ok := got[key]
		if !ok {
			t.Errorf("%s socket of the peer namespace: no histogram (key %+v)", name, key)
			continue
		}
		prev := before[key]
		d := w.Since(&prev)
		if d.Count() != n || sumWait(&d, slowBucket, hist.WaitBuckets-1) != n {
			t.Errorf("%s socket of the peer namespace: %d reads, %d of them at %v or more, want %d: %v",
				name, d.Count(), sumWait(&d, slowBucket, hist.WaitBuckets-1), delay, n, d.Buckets)
		}
	}
	for _, h := range []Hook{TCPSocketRead, UDPSocketRead} {
		if h == TCPSocketRead && !tcp {
			continue
		}
		// The latency histogram's bucket of (2^26, 2^27] ns.
		if gained := hAfter.of(h).Buckets[27] - hBefore.of(h).Buckets[27]; gained >= n {
			t.Errorf("%s, our namespace only, gained %d reads of about %v: the peer namespace's %d too", h, gained, delay, n)
		}
	}
}

// TestReadWaitAddressReuse: keyed by address (before 5.12, a UDP socket
// without a cookie here), a socket that reuses a freed one's memory has a
// histogram of its own: 20 sockets one after the other, each reading one
// datagram 50 ms late, no refresh in between, leave no histogram with two
// such reads, and each of those reads in a histogram. Other processes'
// reads are in the table too: ours are the ones of 50 ms (or, oversleeping
// in an emulated guest, a little more).
func TestReadWaitAddressReuse(t *testing.T) {
	p := testenv.NewPeer(t, "stl-rwreuse", 26)
	tr := start(t, Config{Hooks: HookSet(0).With(UDPSocketRead), ReadWait: true, noCookieHelper: true})
	waitForReadStamps(t, tr, p)
	before := readWaits(t, tr)
	const sockets, delay = 20, 50 * time.Millisecond
	bucket := 26 - hist.WaitFirstSlot // 50 ms lies in (2^25, 2^26] ns
	for range sockets {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: p.HostIP4.AsSlice()})
		if err != nil {
			t.Fatal(err)
		}
		testenv.ReadDatagrams(t, p.DialUDP(t, c.LocalAddr().(*net.UDPAddr)), c, 1, delay)
		c.Close()
	}
	var ours, late uint64
	addresses := map[uint64]int{} // histograms of our reads per address
	for key, w := range readWaits(t, tr) {
		prev := before[key]
		d := w.Since(&prev)
		n := d.Buckets[bucket]
		if n > 1 {
			t.Errorf("histogram %+v holds %d reads of %v, of sockets that read one each", key, n, delay)
		}
		if n > 0 {
			ours += n
			addresses[key.Socket]++
		}
		for _, m := range d.Buckets[bucket:] {
			late += m
		}
	}
	// Every read is in a histogram: at least as many reads of 50 ms or
	// more as ours (an emulated guest may oversleep one past 2^26 ns;
	// other processes may read that late too).
	if late < sockets {
		t.Errorf("%d reads of %v or later in the histograms, fewer than our %d", late, delay, sockets)
	}
	reused := 0
	for _, n := range addresses {
		reused += n - 1
	}
	t.Logf("%d reads of %v at %d addresses: %d histograms of a socket at a freed one's address", ours, delay, len(addresses), reused)
}

// TestReadWaitTableFull: with room for one socket, the reads of every other
// socket are counted as read_wait_full, each of them. The counter is the
// host's: other processes' UDP reads during the test count too, so ours are
// a lower bound, and our socket must not have found a place.
func TestReadWaitTableFull(t *testing.T) {
	p := testenv.NewPeer(t, "stl-rwfull", 24)
	tr := start(t, Config{Hooks: HookSet(0).With(UDPSocketRead), ReadWait: true, MaxSockets: 1})
	waitForReadStamps(t, tr, p) // its reads take the one place
	before, err := tr.ReadWaitFull()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: p.HostIP4.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	key := cookie(t, srv)
	const n = 5
	testenv.ReadDatagrams(t, p.DialUDP(t, srv.LocalAddr().(*net.UDPAddr)), srv, n, 0)
	after, err := tr.ReadWaitFull()
	if err != nil {
		t.Fatal(err)
	}
	if after-before < n {
		t.Errorf("read_wait_full grew by %d, want at least our %d reads", after-before, n)
	}
	got := readWaits(t, tr)
	if _, ok := got[key]; ok || len(got) != 1 {
		t.Errorf("%d histograms in a table of 1, ours among them: %v", len(got), ok)
	}
}

// TestReadWaitOffKeepsNothing: without ReadWait (latency alone) the reads
// are in the probe's histogram and in no socket's.
func TestReadWaitOffKeepsNothing(t *testing.T) {
	p := testenv.NewPeer(t, "stl-rwoff", 25)
	tr := start(t, Config{Hooks: socketReads})
	waitForReadStamps(t, tr, p)
	p.TCPToHost(t, testenv.V4, 3, 0)
	if got := readWaits(t, tr); len(got) != 0 {
		t.Errorf("read wait off, yet %d socket histograms: %v", len(got), got)
	}
	if n := totals(t, tr).of(TCPSocketRead).Count(); n < 3 {
		t.Errorf("tcp-socket-read counted %d reads, want at least 3", n)
	}
}

// waitForReadStamps reads datagrams from p until udp-socket-read records
// one: RX timestamping is switched on asynchronously after start.
func waitForReadStamps(t *testing.T, tr *Tracer, p *testenv.Peer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for totals(t, tr).of(UDPSocketRead).Count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no RX-stamped datagram read within 5s")
		}
		p.UDPToHost(t, testenv.V4, 1, 0)
		time.Sleep(20 * time.Millisecond)
	}
}

func sumWait(w *hist.Wait, from, to int) uint64 {
	var n uint64
	for j := from; j <= to; j++ {
		n += w.Buckets[j]
	}
	return n
}
