package latency

import (
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/testenv"
)

// socketReads are the two socket-read hooks, which read wait needs.
var socketReads = HookSet(0).With(TCPSocketRead).With(UDPSocketRead)

// cookie is the kernel's socket cookie of c (SO_COOKIE): the key of its
// read-wait histogram on kernels with the cookie helper, and after the
// getsockopt on every kernel.
func cookie(t *testing.T, c syscall.Conn) uint64 {
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
	return v
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
// into its socket's histogram, keyed by the socket's cookie: a TCP and a
// UDP socket read 120 ms late and a TCP socket read at once have exactly
// their reads in their own histograms, in the buckets of those waits; the
// max is the refresh's (0 at the next refresh without reads, the counts
// unchanged); a forgotten socket is gone.
func TestReadWaitPerSocket(t *testing.T) {
	p := testenv.NewPeer(t, "stl-rwait", 23)
	tr := start(t, Config{Hooks: socketReads, ReadWait: true})
	waitForReadStamps(t, tr, p)
	// The keys are the sockets' cookies: make them before the first read,
	// so that kernels without the cookie helper (before 5.12) key them so
	// too rather than by address.
	slow, slowPeer := p.TCPFromPeer(t, testenv.V4)
	fast, fastPeer := p.TCPFromPeer(t, testenv.V6)
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: p.HostIP4.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	keys := map[string]uint64{"slow": cookie(t, slow), "fast": cookie(t, fast), "udp": cookie(t, udp)}
	readWaits(t, tr) // a refresh ends: what follows is the next one's

	const n, delay = 4, 120 * time.Millisecond
	for range n {
		testenv.Exchange(t, slow, slowPeer, delay)
		testenv.Exchange(t, fast, fastPeer, 0)
	}
	peer := p.DialUDP(t, udp.LocalAddr().(*net.UDPAddr))
	buf := make([]byte, 64)
	for range n {
		if _, err := peer.Write([]byte("datagram")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		if _, err := udp.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	got := readWaits(t, tr)
	// 120 ms lies in (2^26, 2^27] ns: read-wait bucket 27 - 10.
	slowBucket := 27 - hist.WaitFirstSlot
	for name, key := range keys {
		w, ok := got[key]
		if !ok {
			t.Fatalf("%s socket (cookie %d): no histogram; have %v", name, key, got)
		}
		var zero SocketWait
		d := w.Since(&zero)
		if d.Count() != n {
			t.Errorf("%s: %d samples, want %d (%v)", name, d.Count(), n, d.Buckets)
		}
		if name == "fast" {
			if d.Max() >= uint64(delay) || d.Quantile(1) >= uint64(delay) {
				t.Errorf("fast: max %d ns, p100 %d ns: as slow as the slow reads", d.Max(), d.Quantile(1))
			}
			continue
		}
		if below := sumWait(&d, 0, slowBucket-1); below != 0 || d.MaxNs < uint64(delay) || d.SumNs < n*uint64(delay) {
			t.Errorf("%s: %d samples below %v, max %d ns, sum %d ns: buckets %v", name, below, delay, d.MaxNs, d.SumNs, d.Buckets)
		}
	}

	again := readWaits(t, tr)
	for name, key := range keys {
		if w := again[key]; w.Buckets != got[key].Buckets || w.SumNs != got[key].SumNs || w.MaxNs != 0 {
			t.Errorf("%s at a refresh without reads: %+v, want the counts of %+v and max 0", name, w, got[key])
		}
	}
	if err := tr.ForgetSockets([]uint64{keys["slow"], keys["slow"] + 1<<62, keys["fast"]}); err != nil {
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
	peer := p.DialUDP(t, srv.LocalAddr().(*net.UDPAddr))
	buf := make([]byte, 64)
	for range n {
		if _, err := peer.Write([]byte("datagram")); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
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
