// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stacktop/stacktop/internal/attach"
	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/testenv"
	"github.com/stacktop/stacktop/internal/testenv/reexec"
)

// TestEveryProbeSeesPeerTraffic sends UDP datagrams, TCP messages and raw TCP
// SYNs from a peer namespace over a veth pair, per address family, and checks
// that each hook's count grows by at least what was generated. The interface
// filter keeps other tests' traffic on this kernel out of the counts.
func TestEveryProbeSeesPeerTraffic(t *testing.T) {
	p := testenv.NewPeer(t, "stl-every", 1)
	tr := start(t, Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(p.HostIndex)}})
	waitForStamps(t, tr, p)

	const datagrams, messages, syns = 20, 10, 15
	for _, f := range []testenv.Family{testenv.V4, testenv.V6} {
		before := totals(t, tr)
		p.UDPToHost(t, f, datagrams, 0)
		p.TCPToHost(t, f, messages, 0)
		p.SYNsToHost(t, f, syns)
		want := map[Hook]uint64{
			IPStart:           datagrams + syns,
			TCPStart:          syns,
			UDPStart:          datagrams,
			TCPSocketEnqueued: messages,
			UDPSocketEnqueued: datagrams,
			TCPSocketRead:     messages,
			UDPSocketRead:     datagrams,
		}
		// The last raw SYN may still be between two hooks when the
		// sender returns (it waits for no answer): 14 of 15 once on 5.10.
		var got hookHists
		testenv.Eventually(t, 5*time.Second, fmt.Sprintf("IPv%d samples per hook", f), func() error {
			got = delta(before, totals(t, tr))
			for hook, n := range want {
				if c := got.of(hook).Count(); c < n {
					return fmt.Errorf("%s: %d samples, want at least %d (all: %v)", hook, c, n, counts(got))
				}
			}
			return nil
		})
		for hook := range want {
			h := got.of(hook)
			if h.Count() > 0 && h.Sum == 0 {
				t.Errorf("IPv%d %s: %d samples but a zero sum", f, hook, h.Count())
			}
		}
		t.Logf("IPv%d: %v", f, counts(got))
	}
	checkRecordedCounters(t, tr)
}

// checkRecordedCounters: the "recorded" debug counter of every hook is the
// number of samples in its histograms (the programs do not count them, user
// space sums the buckets), read between two reads of the histograms.
func checkRecordedCounters(t *testing.T, tr *Tracer) {
	t.Helper()
	before := totals(t, tr)
	counters, err := tr.Counters()
	if err != nil {
		t.Fatal(err)
	}
	after := totals(t, tr)
	recorded := map[string]uint64{}
	for _, c := range counters {
		if c.Reason == Reasons[reasonRecorded] {
			recorded[c.Hook] = c.Count
		}
	}
	for _, h := range defaultHooks() {
		lo, hi, n := before.of(h).Count(), after.of(h).Count(), recorded[h.String()]
		if n < lo || n > hi || hi == 0 {
			t.Errorf("%s: recorded counter %d, histograms %d then %d samples", h, n, lo, hi)
		}
	}
}

func counts(m hookHists) map[string]uint64 {
	out := map[string]uint64{}
	for k, h := range m {
		out[k] = h.Count()
	}
	return out
}

// TestSocketReadIncludesApplicationDelay has the receiver sleep 400 ms
// before each read: the socket-read hooks must put those reads above 2^28
// ns (268 ms) while the enqueued hooks, for the same packets, stay at or
// below it. The margin is for emulated guests on a busy host, which were
// seen to take over 67 ms to enqueue a datagram.
func TestSocketReadIncludesApplicationDelay(t *testing.T) {
	p := testenv.NewPeer(t, "stl-delay", 2)
	tr := start(t, Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(p.HostIndex)}})
	waitForStamps(t, tr, p)

	const n, slot = 3, 28 // slot 28 holds (2^27, 2^28] ns
	before := totals(t, tr)
	p.UDPToHost(t, testenv.V4, n, 400*time.Millisecond)
	longest := p.TCPToHost(t, testenv.V6, n, 400*time.Millisecond)
	got := delta(before, totals(t, tr))

	for _, hook := range []Hook{TCPSocketRead, UDPSocketRead} {
		h := got.of(hook)
		if below := sumBuckets(h, 0, slot); h.Count() < n || below != 0 {
			t.Errorf("%s: %d reads, %d of them at or below 2^%d ns; want >= %d, none: %v", hook, h.Count(), below, slot, n, h.Buckets)
		}
	}
	// Nor can a TCP read have waited longer than its exchange took: a "now"
	// that is stale, late or on the wrong clock lands outside
	// (2^28, slot of longest] ns.
	if h, top := got.of(TCPSocketRead), hist.Slot(uint64(longest)); sumBuckets(h, top+1, hist.MaxSlot) != 0 {
		t.Errorf("%s: reads above 2^%d ns, the longest exchange (%v): %v", TCPSocketRead, top, longest, h.Buckets)
	}
	// A FIN is enqueued too, hence at least n samples.
	for _, hook := range []Hook{TCPSocketEnqueued, UDPSocketEnqueued} {
		h := got.of(hook)
		if above := sumBuckets(h, slot+1, hist.MaxSlot); h.Count() < n || above != 0 {
			t.Errorf("%s: %d samples, %d of them above 2^%d ns; want >= %d, none: %v", hook, h.Count(), above, slot, n, h.Buckets)
		}
	}
}

func sumBuckets(h *hist.Histogram, from, to int) uint64 {
	var n uint64
	for i := from; i <= to; i++ {
		n += h.Buckets[i]
	}
	return n
}

// TestPIDFilter: -p applies to the socket-read hooks (the reading task), as
// in netstacklat. Filtering on another process hides our reads; filtering on
// ours keeps them; the enqueued hooks are not filtered by pid.
func TestPIDFilter(t *testing.T) {
	p := testenv.NewPeer(t, "stl-pid", 3)
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()

	for _, tc := range []struct {
		name  string
		pid   int
		reads bool
	}{{"another process", other.Process.Pid, false}, {"this process", os.Getpid(), true}} {
		t.Run(tc.name, func(t *testing.T) {
			tr := start(t, Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(p.HostIndex)}, PIDs: []uint32{uint32(tc.pid)}})
			waitForStamps(t, tr, p)
			const n = 5
			before := totals(t, tr)
			p.UDPToHost(t, testenv.V4, n, 0)
			p.TCPToHost(t, testenv.V4, n, 0)
			got := delta(before, totals(t, tr))
			for _, hook := range []Hook{TCPSocketRead, UDPSocketRead} {
				if c := got.of(hook).Count(); (c >= n) != tc.reads || (!tc.reads && c != 0) {
					t.Errorf("-p %d: %s counted %d of our %d reads", tc.pid, hook, c, n)
				}
			}
			for _, hook := range []Hook{TCPSocketEnqueued, UDPSocketEnqueued} {
				if c := got.of(hook).Count(); c < n {
					t.Errorf("-p %d: %s counted %d, want >= %d (not filtered by pid)", tc.pid, hook, c, n)
				}
			}
		})
	}
}

// TestInterfaceFilterAndGrouping: with -i of one veth and -I, every series
// carries that interface's name and its traffic is all counted; the other
// veth's traffic is not. Without -i, -I splits the two veths.
func TestInterfaceFilterAndGrouping(t *testing.T) {
	a := testenv.NewPeer(t, "stl-ifa", 4)
	b := testenv.NewPeer(t, "stl-ifb", 5)
	const n = 7

	t.Run("filter", func(t *testing.T) {
		tr := start(t, Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(a.HostIndex)}, GroupByIface: true})
		waitForStamps(t, tr, a)
		before := totals(t, tr)
		a.UDPToHost(t, testenv.V4, n, 0)
		b.UDPToHost(t, testenv.V4, n, 0)
		got := delta(before, totals(t, tr))
		for _, s := range mustRead(t, tr) {
			if s.Iface != a.HostIf {
				t.Errorf("-i %s: series for interface %q: %+v", a.HostIf, s.Iface, s)
			}
		}
		for _, hook := range []Hook{UDPStart, UDPSocketEnqueued, UDPSocketRead} {
			if c := got.of(hook).Count(); c != n {
				t.Errorf("-i %s: %s counted %d, want exactly %d", a.HostIf, hook, c, n)
			}
		}
	})
	t.Run("group", func(t *testing.T) {
		tr := start(t, Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(a.HostIndex), uint32(b.HostIndex)}, GroupByIface: true})
		waitForStamps(t, tr, a)
		a.UDPToHost(t, testenv.V4, n, 0)
		b.UDPToHost(t, testenv.V4, 2*n, 0)
		perIface := map[string]uint64{}
		for _, s := range mustRead(t, tr) {
			if s.Hook == UDPSocketRead.String() {
				perIface[s.Iface] += s.Hist.Count()
			}
		}
		if perIface[a.HostIf] < n || perIface[b.HostIf] != 2*n {
			t.Errorf("udp-socket-read per interface: %v, want %s >= %d and %s = %d", perIface, a.HostIf, n, b.HostIf, 2*n)
		}
	})
	t.Run("map full", func(t *testing.T) {
		tr := start(t, Config{Hooks: HookSet(0).With(UDPStart), Ifindexes: []uint32{uint32(a.HostIndex), uint32(b.HostIndex)},
			GroupByIface: true, MaxHistograms: 1})
		waitForStamps(t, tr, a)
		b.UDPToHost(t, testenv.V4, n, 0)
		if s := mustRead(t, tr); len(s) != 1 || s[0].Iface != a.HostIf {
			t.Errorf("with room for one histogram: %+v", s)
		}
		counters, err := tr.Counters()
		if err != nil {
			t.Fatal(err)
		}
		want := Counter{Hook: UDPStart.String(), Reason: ReasonHistFull, Count: n}
		if !slices.Contains(counters, want) {
			t.Errorf("counters %+v do not contain %+v", counters, want)
		}
	})
}

// TestNetnsSeparation: netfilter links see only their own namespace, so -n
// <inode> attaches them inside that namespace; the tp_btf and fentry hooks
// see every namespace and filter on the socket's or device's. Traffic received in namespace a is
// counted, traffic received in namespace b is not, and with the default (our
// own namespace) reads from a socket in a are not counted either.
func TestNetnsSeparation(t *testing.T) {
	a := testenv.NewPeer(t, "stl-sepa", 6)
	b := testenv.NewPeer(t, "stl-sepb", 7)
	const na, nb = 5, 40

	t.Run("inode", func(t *testing.T) {
		tr := start(t, Config{Hooks: DefaultHooks, Netns: int64(a.Inode())})
		waitForStampsIn(t, tr, a)
		before := totals(t, tr)
		a.UDPToPeer(t, na)
		b.UDPToPeer(t, nb)
		got := delta(before, totals(t, tr))
		for _, hook := range []Hook{UDPStart, UDPSocketEnqueued, UDPSocketRead} {
			if c := got.of(hook).Count(); c != na {
				t.Errorf("-n %d: %s counted %d, want exactly the %d datagrams received in that namespace", a.Inode(), hook, c, na)
			}
		}
		if c := got.of(IPStart).Count(); c < na || c >= na+nb {
			t.Errorf("-n %d: ip-start counted %d, want >= %d and < %d", a.Inode(), c, na, na+nb)
		}
	})
	t.Run("own", func(t *testing.T) {
		tr := start(t, Config{Hooks: DefaultHooks, PIDs: []uint32{uint32(os.Getpid())}})
		a.UDPToPeer(t, na)
		if c := totals(t, tr).of(UDPSocketRead).Count(); c != 0 {
			t.Errorf("-n 0: our reads from a socket in another namespace were counted: %d", c)
		}
	})
}

// TestAllNamespacesFollowsNewOnes: with -n -1 the hooks see a namespace
// created after start: netfilter hooks are attached in it and released once
// it is gone; fentry and tp_btf hooks see it without attaching anything.
func TestAllNamespacesFollowsNewOnes(t *testing.T) {
	testenv.RequireRoot(t)
	tr := start(t, Config{Hooks: DefaultHooks, Netns: AllNetns})
	var inode uint64
	t.Run("new namespace", func(t *testing.T) {
		c := testenv.NewPeer(t, "stl-nsnew", 8)
		inode = c.Inode()
		testenv.Until(t, 3*maintainEvery, "netfilter links in the new namespace", func() bool { return tr.attachedIn(inode) })
		waitForStampsIn(t, tr, c)
		before := totals(t, tr)
		c.UDPToPeer(t, 5)
		if got := delta(before, totals(t, tr)); got.of(UDPStart).Count() < 5 {
			t.Errorf("udp-start in the new namespace: %d, want >= 5", got.of(UDPStart).Count())
		}
	})
	if tr.usesNetfilter() {
		testenv.Until(t, 3*maintainEvery, "netfilter links released after the namespace was deleted", func() bool { return !tr.attachedIn(inode) })
	}
}

// usesNetfilter reports whether any hook is served by a netfilter program.
func (t *Tracer) usesNetfilter() bool {
	return slices.ContainsFunc(t.engine.Attached(), func(a attach.Attached) bool { return a.Kind == attach.Netfilter })
}

// newCgroup makes a cgroup named name under the v2 root for the test, and
// returns its directory.
func newCgroup(t *testing.T, name string) string {
	t.Helper()
	root, err := cgroup.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, name)
	_ = os.Remove(dir) // left by a killed run
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir
}

// TestCgroupFilterAndGrouping: a child process in a cgroup of its own reads
// datagrams alongside this process. With -C the socket-read histograms split
// by the reading task's cgroup, named by path; with -c only the child's
// cgroup is counted.
func TestCgroupFilterAndGrouping(t *testing.T) {
	p := testenv.NewPeer(t, "stl-cg", 11)
	dir := newCgroup(t, "stl-cgtest")
	childCgroup, err := cgroup.ID(dir)
	if err != nil {
		t.Fatal(err)
	}
	ourCgroup := ownCgroupPath(t)
	const ours, theirs = 4, 6

	for _, tc := range []struct {
		name string
		cfg  Config
		want map[string]uint64
	}{
		{"group", Config{GroupByCgroup: true}, map[string]uint64{ourCgroup: ours, "/stl-cgtest": theirs}},
		{"filter", Config{GroupByCgroup: true, Cgroups: []uint64{childCgroup}}, map[string]uint64{"/stl-cgtest": theirs}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Hooks, cfg.Ifindexes = DefaultHooks, []uint32{uint32(p.HostIndex)}
			tr := start(t, cfg)
			waitForStamps(t, tr, p)
			before := readsPerCgroup(t, tr)
			p.UDPToHost(t, testenv.V4, ours, 0)
			readInChild(t, p, "udp", dir, theirs)
			got := readsPerCgroup(t, tr)
			for cg := range got {
				got[cg] -= before[cg]
				if got[cg] == 0 {
					delete(got, cg)
				}
			}
			if !maps.Equal(got, tc.want) {
				counters, _ := tr.Counters()
				t.Errorf("udp-socket-read per cgroup: %v, want %v; counters %+v", got, tc.want, counters)
			}
		})
	}
}

// TestProcessGrouping: -P splits the socket-read hooks by the reading
// process, each child's exact number of reads under its pid and comm; the
// softirq hooks, which run in whatever task was interrupted, stay under pid
// 0 and comm "-".
func TestProcessGrouping(t *testing.T) {
	p := testenv.NewPeer(t, "stl-proc", 13)
	type process struct {
		pid  uint32
		comm string
	}
	tr := start(t, Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(p.HostIndex)}, GroupByProcess: true})
	waitForStamps(t, tr, p)
	for _, proto := range []string{"tcp", "udp"} {
		t.Run(proto, func(t *testing.T) {
			hook := TCPSocketRead
			if proto == "udp" {
				hook = UDPSocketRead
			}
			before := perProcess(t, tr)
			a := readInChild(t, p, proto, "", 3)
			b := readInChild(t, p, proto, "", 5)
			got := perProcess(t, tr)
			reads := map[process]uint64{}
			for key, n := range got {
				if key.pid == 0 && key.comm != "-" || key.pid != 0 && !slices.Contains([]Hook{TCPSocketRead, UDPSocketRead}, key.hook) {
					t.Errorf("%s under pid %d, comm %q", key.hook, key.pid, key.comm)
				}
				if key.hook == hook && n > before[key] {
					reads[process{key.pid, key.comm}] = n - before[key]
				}
			}
			want := map[process]uint64{{uint32(a), readerComm}: 3, {uint32(b), readerComm}: 5}
			if !maps.Equal(reads, want) {
				counters, _ := tr.Counters()
				t.Errorf("%s per process: %v, want %v; counters %+v", hook, reads, want, counters)
			}
		})
	}
	// Room for udp-start's histogram and our own reads': a new process's
	// reads are counted as hist_full, each of them.
	t.Run("map full", func(t *testing.T) {
		tr := start(t, Config{Hooks: HookSet(0).With(UDPStart).With(UDPSocketRead),
			Ifindexes: []uint32{uint32(p.HostIndex)}, GroupByProcess: true, MaxHistograms: 2})
		waitForStamps(t, tr, p)
		const n = 4
		child := readInChild(t, p, "udp", "", n)
		for key := range perProcess(t, tr) {
			if key.pid == uint32(child) {
				t.Errorf("the child's reads found room: %+v", key)
			}
		}
		counters, err := tr.Counters()
		if err != nil {
			t.Fatal(err)
		}
		want := Counter{Hook: UDPSocketRead.String(), Reason: ReasonHistFull, Count: n}
		if !slices.Contains(counters, want) {
			t.Errorf("counters %+v do not contain %+v", counters, want)
		}
	})
}

type hookProcess struct {
	hook Hook
	pid  uint32
	comm string
}

func perProcess(t *testing.T, tr *Tracer) map[hookProcess]uint64 {
	out := map[hookProcess]uint64{}
	for _, s := range mustRead(t, tr) {
		h, err := ParseHook(s.Hook)
		if err != nil {
			t.Fatal(err)
		}
		out[hookProcess{h, s.PID, s.Comm}] += s.Hist.Count()
	}
	return out
}

// TestHostileNamesInGroups: a reader whose process and cgroup names are not
// valid UTF-8 (any local user can choose both) is grouped by -P and -C under
// the names escaped as everywhere else, and every name a series carries is
// valid UTF-8 (JSON, CSV and Prometheus labels need it).
func TestHostileNamesInGroups(t *testing.T) {
	p := testenv.NewPeer(t, "stl-hostile", 17)
	dir := newCgroup(t, "stl-\xff\xfe")
	tr := start(t, Config{Hooks: AllHooks, Ifindexes: []uint32{uint32(p.HostIndex)}, GroupByProcess: true, GroupByCgroup: true})
	waitForStamps(t, tr, p)
	pid := readInChildAs(t, "bad\xff\xfe", p, "udp", dir, 3)
	var reads uint64
	for _, s := range mustRead(t, tr) {
		if !utf8.ValidString(s.Comm) || !utf8.ValidString(s.Cgroup) {
			t.Errorf("%s: comm %q, cgroup %q: not valid UTF-8", s.Hook, s.Comm, s.Cgroup)
		}
		if s.Hook == UDPSocketRead.String() && s.PID == uint32(pid) {
			reads += s.Hist.Count()
			if s.Comm != `bad\xff\xfe` || s.Cgroup != `/stl-\xff\xfe` {
				t.Errorf("the reader as comm %q, cgroup %q; want %q, %q", s.Comm, s.Cgroup, `bad\xff\xfe`, `/stl-\xff\xfe`)
			}
		}
	}
	if reads != 3 {
		t.Errorf("the reader's udp-socket-read count: %d, want 3", reads)
	}
}

func readsPerCgroup(t *testing.T, tr *Tracer) map[string]uint64 {
	out := map[string]uint64{}
	for _, s := range mustRead(t, tr) {
		if s.Hook == UDPSocketRead.String() {
			out[s.Cgroup] += s.Hist.Count()
		}
	}
	return out
}

func ownCgroupPath(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			return path
		}
	}
	t.Fatal("no cgroup v2 line in /proc/self/cgroup")
	return ""
}

// readInChild has a child process (started inside the cgroup directory dir
// unless it is "") receive n messages that the peer sends to it over proto,
// "udp" or "tcp", acknowledging each before the next is sent, so each is one
// read; it returns the child's pid.
func readInChild(t *testing.T, p *testenv.Peer, proto, dir string, n int) int {
	t.Helper()
	return readInChildAs(t, readerComm, p, proto, dir, n)
}

// readInChildAs is readInChild in a child named comm.
func readInChildAs(t *testing.T, comm string, p *testenv.Peer, proto, dir string, n int) int {
	t.Helper()
	sock, send := peerSocket(t, p, proto)
	defer sock.Close()
	child := reexec.CommandAs(t, comm, "read-messages", "STL_READ_MESSAGES="+strconv.Itoa(n), "STL_READ_PROTO="+proto)
	child.ExtraFiles = []*os.File{sock} // fd 3
	if dir != "" {
		cg, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer cg.Close()
		child.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	ack := bufio.NewReader(stdout)
	for i := range n {
		send()
		if _, err := ack.ReadString('\n'); err != nil {
			t.Fatalf("child after %d messages: %v", i, err)
		}
	}
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	return child.Process.Pid
}

// peerSocket returns our end, as a file to hand to a child, of a UDP socket
// or an accepted TCP connection the peer sends to, and a function that sends
// one message from the peer.
func peerSocket(t *testing.T, p *testenv.Peer, proto string) (*os.File, func()) {
	t.Helper()
	host := p.HostIP4.AsSlice()
	var f *os.File
	var peer net.Conn
	if proto == "udp" {
		srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: host})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		peer = p.DialUDP(t, srv.LocalAddr().(*net.UDPAddr))
		if f, err = srv.File(); err != nil {
			t.Fatal(err)
		}
	} else {
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: host})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := p.Do(func() (err error) { peer, err = net.Dial("tcp", ln.Addr().String()); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { peer.Close() })
		s, err := ln.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if f, err = s.File(); err != nil {
			t.Fatal(err)
		}
	}
	return f, func() {
		if _, err := peer.Write([]byte("message")); err != nil {
			t.Fatal(err)
		}
	}
}

// readerComm is the process name of readInChild's children.
const readerComm = "stl-reader"

func TestMain(m *testing.M) {
	reexec.Main(m, reexec.Helpers{"read-messages": readMessages})
}

// readMessages is the child of readInChild: it reads STL_READ_MESSAGES
// messages from the STL_READ_PROTO socket at fd 3 and acknowledges each on
// stdout.
func readMessages() error {
	n, err := strconv.Atoi(os.Getenv("STL_READ_MESSAGES"))
	if err != nil {
		return err
	}
	sock := os.NewFile(3, "socket")
	var conn net.Conn
	if os.Getenv("STL_READ_PROTO") == "udp" {
		var pc net.PacketConn
		pc, err = net.FilePacketConn(sock)
		conn, _ = pc.(net.Conn)
	} else {
		conn, err = net.FileConn(sock)
	}
	if err != nil {
		return err
	}
	buf := make([]byte, len("message"))
	for range n {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(conn, buf); err != nil {
			return err
		}
		fmt.Println("read")
	}
	return nil
}

// TestUDPReadCoverage measures which share of UDP reads the FIFO design of
// udp-socket-read attributes to a datagram, for traffic patterns from
// one-at-a-time to bursts deeper than the FIFO and concurrent senders. The
// numbers are logged (docs/LATENCY.md quotes them); the assertions are the
// guarantees of the design: every read is counted while the socket's queue
// stays within the FIFO, at most one sample per read, and beyond the FIFO at
// least the FIFO's worth per burst.
func TestUDPReadCoverage(t *testing.T) {
	p := testenv.NewPeer(t, "stl-cover", 12)
	tr := start(t, Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(p.HostIndex)}})
	waitForStamps(t, tr, p)

	for _, tc := range []struct {
		name         string
		bursts, size int
		senders      int
		minCovered   float64
	}{
		{"one at a time", 200, 1, 1, 1},
		{"bursts of 16", 10, 16, 1, 1},
		{"bursts of 64", 4, fifoLen, 1, 1},
		{"bursts of 200", 2, 200, 1, float64(fifoLen) / 200},
		{"4 concurrent senders", 10, 40, 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := totals(t, tr)
			reads := udpBursts(t, p, tc.bursts, tc.size, tc.senders)
			got := delta(before, totals(t, tr))
			samples := got.of(UDPSocketRead).Count()
			coverage := float64(samples) / float64(reads)
			t.Logf("%s: %d of %d reads attributed (%.1f%%), udp-socket-enqueued %d",
				tc.name, samples, reads, 100*coverage, got.of(UDPSocketEnqueued).Count())
			if samples > uint64(reads) || coverage < tc.minCovered {
				t.Errorf("%d samples for %d reads, want between %.0f%% and 100%%", samples, reads, 100*tc.minCovered)
			}
		})
	}
}

// fifoLen is FIFO_LEN in the BPF program.
const fifoLen = 64

// udpBursts sends bursts of size datagrams (split over senders sockets in the
// peer, sending at once) and reads each burst after it arrived; it returns
// the number of datagrams read.
func udpBursts(t *testing.T, p *testenv.Peer, bursts, size, senders int) int {
	t.Helper()
	srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: p.HostIP4.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conns := make([]*net.UDPConn, senders)
	for i := range conns {
		conns[i] = p.DialUDP(t, srv.LocalAddr().(*net.UDPAddr))
	}
	buf := make([]byte, 64)
	read := 0
	for range bursts {
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range size / senders {
					c.Write([]byte("burst"))
				}
			}()
		}
		wg.Wait()
		for range size / senders * senders {
			_ = srv.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := srv.Read(buf); err != nil {
				break // dropped on the way: count what arrived
			}
			read++
		}
	}
	return read
}

// TestMinQueueLength: with -q 5 a read counts only when it leaves at least
// five datagrams queued. Ten queued datagrams read one by one leave 9..0
// behind, so exactly five of the ten reads count.
func TestMinQueueLength(t *testing.T) {
	p := testenv.NewPeer(t, "stl-qlen", 13)
	tr := start(t, Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(p.HostIndex)}, MinQueueLen: 5})
	waitForStamps(t, tr, p)
	before := totals(t, tr)
	reads := udpBursts(t, p, 1, 10, 1)
	got := delta(before, totals(t, tr))
	if reads != 10 || got.of(UDPSocketRead).Count() != 5 {
		t.Errorf("-q 5: %d of %d reads counted, want 5 of 10", got.of(UDPSocketRead).Count(), reads)
	}
}

// TestReadWhileTrafficFlows calls Read and Counters from several goroutines
// while packets are recorded (run with -race to check the locking): every
// call succeeds and counts never go down between consecutive reads.
func TestReadWhileTrafficFlows(t *testing.T) {
	p := testenv.NewPeer(t, "stl-read", 15)
	tr := start(t, Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(p.HostIndex)}, GroupByIface: true})
	waitForStamps(t, tr, p)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				series, err := tr.Read()
				if _, cerr := tr.Counters(); err != nil || cerr != nil {
					t.Errorf("Read: %v, Counters: %v", err, cerr)
					return
				}
				var n uint64
				for _, s := range series {
					n += s.Hist.Count()
				}
				if n < last {
					t.Errorf("total count went down from %d to %d", last, n)
				}
				last = n
			}
		}()
	}
	p.UDPToHost(t, testenv.V4, 50, 0)
	close(stop)
	wg.Wait()
}

// attachedIn reports whether every netfilter program has links in the
// namespace with this inode.
func (t *Tracer) attachedIn(inode uint64) bool {
	for _, a := range t.engine.Attached() {
		if a.Kind == attach.Netfilter && !slices.Contains(a.Netns, inode) {
			return false
		}
	}
	return true
}

// TestOnlyTheEnabledProbesProgramsAttach: a probe enabled alone attaches
// exactly the programs Programs lists for the backend it got (what -l
// shows), so `-e tcp-socket-read` pays for nothing else.
func TestOnlyTheEnabledProbesProgramsAttach(t *testing.T) {
	for _, h := range Hooks {
		t.Run(h.String(), func(t *testing.T) {
			tr := start(t, Config{Hooks: HookSet(0).With(h)})
			var got, want []string
			for _, a := range tr.engine.Attached() {
				got = append(got, a.Name)
			}
			for _, p := range table[h].Programs(tr.Choices()[0].Backend) {
				if slices.Contains(got, p.Name) || !p.Optional {
					want = append(want, p.Name)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("attached %v, want %v", got, want)
			}
		})
	}
}

// TestEveryProgramIsPlanned: every program of the object implements some
// probe on some backend, as the table says (or an --at probe, of its kind
// of point), and says on what event it runs.
func TestEveryProgramIsPlanned(t *testing.T) {
	spec, err := loadLatency()
	if err != nil {
		t.Fatal(err)
	}
	hooks := append(table[:], readClockCheck(0, 0))
	for kind, p := range atPrograms {
		hooks = append(hooks, attach.Hook{Name: fmt.Sprint("--at of kind ", kind),
			Backends: []attach.Backend{{Programs: []attach.Program{p}}}})
	}
	if err := attach.Check(spec, hooks); err != nil {
		t.Error(err)
	}
	for _, h := range hooks {
		for _, b := range h.Backends {
			for _, p := range b.Programs {
				if p.RunsPer == "" {
					t.Errorf("program %s of %s: no event it runs per", p.Name, h.Name)
				}
			}
		}
	}
}

// TestInterfacesOfOtherNamespacesAreTheirOwn: ifindexes repeat between
// namespaces (every one has its lo at 1), so with -n -1 -I reads on a peer
// namespace's lo and on ours come out as two series, each with exactly the
// reads made on it; ours keeps the plain name, the peer's is named after
// its namespace. The pid filter keeps other processes' loopback reads out.
func TestInterfacesOfOtherNamespacesAreTheirOwn(t *testing.T) {
	p := testenv.NewPeer(t, "stl-nsif", 9)
	tr := start(t, Config{Hooks: HookSet(0).With(UDPSocketRead).With(TCPSocketRead), Netns: AllNetns,
		GroupByIface: true, PIDs: []uint32{uint32(os.Getpid())}})
	const nPeer, nOwn = 37, 23
	inPeer := func(fn func()) {
		if err := p.Do(func() error { fn(); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	var peerUDP, peerTCP [2]net.Conn
	inPeer(func() { peerUDP, peerTCP = loopbackPair(t, "udp"), loopbackPair(t, "tcp") })
	ownUDP, ownTCP := loopbackPair(t, "udp"), loopbackPair(t, "tcp")
	for _, c := range [][2]net.Conn{peerUDP, peerTCP} {
		exchange(t, c, nPeer)
	}
	for _, c := range [][2]net.Conn{ownUDP, ownTCP} {
		exchange(t, c, nOwn)
	}
	peerLo := "lo@" + filepath.Base(p.Name)
	want := map[string]uint64{UDPSocketRead.String() + " lo": nOwn, TCPSocketRead.String() + " lo": nOwn,
		UDPSocketRead.String() + " " + peerLo: nPeer, TCPSocketRead.String() + " " + peerLo: nPeer}
	got := map[string]uint64{}
	netnsOf := map[string]uint64{}
	for _, s := range mustRead(t, tr) {
		got[s.Hook+" "+s.Iface] += s.Hist.Count()
		netnsOf[s.Iface] = s.Netns
	}
	if !maps.Equal(got, want) {
		t.Errorf("reads per hook and interface: %v, want %v", got, want)
	}
	if own, _ := ownNetns(); netnsOf["lo"] != own || netnsOf[peerLo] != p.Inode() {
		t.Errorf("namespaces of the series: %v, want lo in %d and %s in %d", netnsOf, own, peerLo, p.Inode())
	}
}

// loopbackPair returns a sender and a receiver connected over 127.0.0.1 in
// the calling thread's namespace (the sockets stay there).
func loopbackPair(t *testing.T, proto string) [2]net.Conn {
	t.Helper()
	if proto == "udp" {
		srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		c, err := net.DialUDP("udp", nil, srv.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return [2]net.Conn{c, srv}
	}
	c, s, err := loopbackTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return [2]net.Conn{c, s}
}

// skipped is how many runs of tr's programs the kernel skipped because the
// program was already running on that CPU (on 7.x a task preempted inside
// it): each is a sample missing, and counted (stacktop_program_misses_total).
func skipped(t *testing.T, tr *Tracer) uint64 {
	t.Helper()
	var n uint64
	for _, a := range tr.engine.Attached() {
		s, err := a.Program.Stats()
		if err != nil {
			t.Fatal(err)
		}
		n += s.RecursionMisses
	}
	return n
}

// exchange sends n messages from c[0] to c[1], reading each whole before
// sending the next: n reads that return data.
func exchange(t *testing.T, c [2]net.Conn, n int) {
	t.Helper()
	msg, buf := []byte("message"), make([]byte, 64)
	for range n {
		if _, err := c[0].Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c[1], buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSampling runs two tracers side by side on the same traffic, one
// recording every packet and one with SampleEvery 4: at every probe the
// sampled one must hold a quarter of the other's samples, within six
// standard deviations of a binomial draw (a chance of about 1 in 10^9 to
// fail by bad luck), and say it is sampled. The UDP reads check that a
// datagram left out still leaves the read FIFO in step.
func TestSampling(t *testing.T) {
	p := testenv.NewPeer(t, "stl-sample", 16)
	cfg := Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(p.HostIndex)}}
	every := start(t, cfg)
	cfg.SampleEvery = 4
	sampled := start(t, cfg)
	waitForStamps(t, every, p)
	waitForStamps(t, sampled, p)

	beforeEvery, beforeSampled := totals(t, every), totals(t, sampled)
	skippedBefore := skipped(t, every)
	const n = 800
	p.UDPToHost(t, testenv.V4, n, 0)
	p.TCPToHost(t, testenv.V4, n, 0)
	p.SYNsToHost(t, testenv.V4, n)
	var all, some hookHists
	testenv.Eventually(t, 5*time.Second, "every packet recorded", func() error {
		all, some = delta(beforeEvery, totals(t, every)), delta(beforeSampled, totals(t, sampled))
		// 7.2 once skipped one of these 800 TCP reads (a task preempted
		// inside the program): a sample the kernel counted as missed.
		missed := skipped(t, every) - skippedBefore
		for _, h := range defaultHooks() {
			if c := all.of(h).Count(); c+missed < n {
				return fmt.Errorf("%s: %d samples and %d runs skipped, want at least %d", h, c, missed, n)
			}
		}
		return nil
	})
	for _, h := range defaultHooks() {
		total, got := float64(all.of(h).Count()), float64(some.of(h).Count())
		mean, sd := total/4, math.Sqrt(total*3/16)
		if math.Abs(got-mean) > 6*sd {
			t.Errorf("%s: %v of %v packets sampled, want %.0f ± %.0f", h, got, total, mean, 6*sd)
		}
		t.Logf("%s: %v of %v", h, got, total)
	}
	series, err := sampled.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range series {
		if s.SampleEvery != 4 {
			t.Errorf("%s: SampleEvery %d, want 4", s.Hook, s.SampleEvery)
		}
	}

	cfg.ReadWait = true
	if tr, err := Start(cfg); err == nil {
		tr.Close()
		t.Error("sampling with read wait started")
	}
}
