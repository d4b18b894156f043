// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/selector"
	"github.com/stacktop/stacktop/internal/termsafe"
)

// cgroupNamer names cgroup ids by their path; without a cgroup v2 mount
// (bpf_get_current_cgroup_id still works) ids are shown as "cgroup:<id>".
type cgroupNamer struct {
	resolver *cgroup.Resolver // nil without a v2 mount
}

func newCgroupNamer() *cgroupNamer {
	r, err := cgroup.NewResolver()
	if err != nil {
		slog.Info("cgroups shown by id", "reason", err)
	}
	return &cgroupNamer{resolver: r}
}

func (c *cgroupNamer) name(id uint64) string {
	if c.resolver == nil {
		return "cgroup:" + strconv.FormatUint(id, 10)
	}
	return c.resolver.Path(id)
}

// ifaceNamer names interfaces by index within their namespace, from one
// netlink dump per namespace and Read: indexes repeat between namespaces.
// Our own namespace's interfaces keep their plain name; another's get
// "@<name>" (its name under /run/netns) or "@netns:<inode>" appended.
type ifaceNamer struct {
	own   uint64
	paths map[uint64]string // every namespace, enumerated on the first foreign one
	names map[uint64]map[uint32]string
}

func newIfaceNamer(own uint64) *ifaceNamer {
	return &ifaceNamer{own: own, names: map[uint64]map[uint32]string{}}
}

// name names interface idx of namespace ns; an index that is not (any more)
// in that namespace is shown as "if<index>".
func (n *ifaceNamer) name(ns uint64, idx uint32) string {
	names, ok := n.names[ns]
	if !ok {
		names = n.dump(ns)
		n.names[ns] = names
	}
	name, ok := names[idx]
	if !ok {
		name = "if" + strconv.FormatUint(uint64(idx), 10)
	}
	if ns == n.own {
		return name
	}
	if p := n.paths[ns]; strings.HasPrefix(p, "/run/netns/") {
		return name + "@" + filepath.Base(p)
	}
	return name + "@netns:" + strconv.FormatUint(ns, 10)
}

// dump lists the interfaces of namespace ns; none when it is gone (the
// names then fall back to "if<index>", and why is logged at debug level).
func (n *ifaceNamer) dump(ns uint64) map[uint32]string {
	out := map[uint32]string{}
	if ns == n.own {
		ifcs, _ := net.Interfaces()
		for _, ifc := range ifcs {
			out[uint32(ifc.Index)] = termsafe.ValidUTF8(ifc.Name)
		}
		return out
	}
	if n.paths == nil {
		n.paths = selector.Namespaces()
	}
	p, ok := n.paths[ns]
	if !ok {
		return out
	}
	links, err := linksAt(p)
	if err != nil {
		slog.Debug("interfaces of another namespace left unnamed", "netns", ns, "path", p, "err", err)
	}
	for _, l := range links {
		out[uint32(l.Attrs().Index)] = termsafe.ValidUTF8(l.Attrs().Name)
	}
	return out
}

// linksAt lists the interfaces of the namespace at path.
func linksAt(path string) ([]netlink.Link, error) {
	h, err := netns.GetFromPath(path)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	// Only rtnetlink: given no family, NewHandleAt opens XFRM and netfilter
	// sockets too, and fails as a whole where those are modules not loaded
	// (Debian's kernels build them as modules; the matrix guests have no
	// modprobe to load them on demand).
	nl, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer nl.Close()
	return nl.LinkList()
}

// commString is a task's comm up to its NUL; "-" for none (pid 0: a hook
// outside any reading task).
func commString(c [16]int8) string {
	b := make([]byte, 0, len(c))
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	if len(b) == 0 {
		return "-"
	}
	return termsafe.ValidUTF8(string(b))
}

// The C's histograms have internal/hist's buckets and one slot more, the
// sum (MAX_SLOT, SUM_SLOT): a build fails when the two disagree.
var _ [hist.NBuckets + 1]uint64 = latencyHistValue{}.Slots

// keyedSeries is a series with the map key it came from, to sort by.
type keyedSeries struct {
	key latencyHistKey
	s   hist.Series
}

// Read returns, per hook (and interface/cgroup/process when grouping), the histogram
// of every sample since Start: cumulative, so a Prometheus collector can
// export it as is. It sums the per-CPU copies and is safe to call from any
// goroutine at any time while the tracer is open.
func (t *Tracer) Read() ([]hist.Series, error) {
	t.mapsMu.RLock()
	defer t.mapsMu.RUnlock()
	if t.objs.Hists == nil {
		return nil, fmt.Errorf("tracer is closed")
	}
	var out []keyedSeries
	ifaces := newIfaceNamer(t.scope.own)
	add := func(key latencyHistKey, perCPU []latencyHistValue) {
		s := hist.Series{Hook: t.hookName(Hook(key.Hook)), Ifindex: key.Ifindex, CgroupID: key.Cgroup,
			Netns: uint64(key.Netns), SampleEvery: t.sampleEvery}
		for _, v := range perCPU {
			for i := range hist.NBuckets {
				s.Hist.Buckets[i] += v.Slots[i]
			}
			s.Hist.Sum += v.Slots[hist.NBuckets]
		}
		if key.Ifindex != 0 {
			s.Iface = ifaces.name(t.scope.ifaceNetns(key.Netns), key.Ifindex)
		}
		if key.Cgroup != 0 {
			s.Cgroup = t.cgroups.name(key.Cgroup)
		}
		if t.byProcess {
			s.PID, s.Comm = key.Pid, commString(key.Comm)
		}
		out = append(out, keyedSeries{key, s})
	}
	if err := t.eachHist(add); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].key, out[j].key
		if a.Hook != b.Hook {
			return a.Hook < b.Hook
		}
		if out[i].s.Iface != out[j].s.Iface {
			return out[i].s.Iface < out[j].s.Iface
		}
		if out[i].s.Cgroup != out[j].s.Cgroup {
			return out[i].s.Cgroup < out[j].s.Cgroup
		}
		if a.Pid != b.Pid {
			return a.Pid < b.Pid
		}
		return out[i].s.Comm < out[j].s.Comm
	})
	series := make([]hist.Series, len(out))
	for i, k := range out {
		series[i] = k.s
	}
	return series, nil
}

// eachHist calls fn with every histogram's per-CPU copies; the caller holds
// mapsMu. Ungrouped, every hook has its histogram from the start: only those
// with samples are passed, as the grouped ones appear with their first.
func (t *Tracer) eachHist(fn func(latencyHistKey, []latencyHistValue)) error {
	var key latencyHistKey
	var perCPU []latencyHistValue
	it := t.objs.Hists.Iterate()
	for it.Next(&key, &perCPU) {
		fn(key, perCPU)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading histograms: %w", err)
	}
	var hook latencyHook
	it = t.objs.HookHists.Iterate()
	for it.Next(&hook, &perCPU) {
		if slices.ContainsFunc(perCPU, func(v latencyHistValue) bool { return v != latencyHistValue{} }) {
			fn(latencyHistKey{Hook: uint16(hook)}, perCPU)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading histograms: %w", err)
	}
	return nil
}

// Names of the debug counters that outputs other than --debug-counters
// read: samples lost for want of room in the histogram map; packets
// recorded (the histograms' samples); socket-read probe reads seen but not
// timed, because the socket's FIFO of enqueue stamps was full or the read
// matched no stamp (udp-socket-read on the tracepoint backend).
const (
	ReasonHistFull      = "hist_full"
	ReasonRecorded      = "recorded"
	ReasonFIFOFull      = "fifo_full"
	ReasonReadUntracked = "read_untracked"
)

// numReasons is the number of debug counters per hook.
const numReasons = int(latencyReasonN_REASONS)

// Reasons name the debug counters by enum reason of the BPF program: what
// happened to each packet a hook saw. TestReasonsNamed fails when the C
// gains a reason without a name here.
var Reasons = [numReasons]string{
	latencyReasonREASON_RECORDED:       ReasonRecorded,
	latencyReasonREASON_NO_STAMP:       "no_stamp",
	latencyReasonREASON_FUTURE_STAMP:   "future_stamp",
	latencyReasonREASON_DELIVERY_TIME:  "delivery_time",
	latencyReasonREASON_HIST_FULL:      ReasonHistFull,
	latencyReasonREASON_HOL_BLOCKED:    "hol_blocked",
	latencyReasonREASON_FIFO_FULL:      ReasonFIFOFull,
	latencyReasonREASON_READ_UNTRACKED: ReasonReadUntracked,
	latencyReasonREASON_READ_WAIT_FULL: ReasonReadWaitFull,
	latencyReasonREASON_NO_HW_STAMP:    "no_hw_stamp",
	latencyReasonREASON_NO_PHC:         "no_phc",
}

// reasonRecorded is never counted by the programs: it is the samples in the
// hook's histograms.
const reasonRecorded = latencyReasonREASON_RECORDED

// Counter is one debug counter: how many packets a hook saw for a reason.
type Counter struct {
	Hook   string `json:"hook"`
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// Counters returns the non-zero debug counters since Start. The programs do
// not count recorded samples (a per-CPU line less per sample): "recorded" is
// the samples in the hook's histograms.
func (t *Tracer) Counters() ([]Counter, error) {
	t.mapsMu.RLock()
	defer t.mapsMu.RUnlock()
	m := t.objs.Counters
	if m == nil {
		return nil, fmt.Errorf("tracer is closed")
	}
	hooks := t.hooks()
	recorded := make([]uint64, len(hooks))
	err := t.eachHist(func(key latencyHistKey, perCPU []latencyHistValue) {
		for _, v := range perCPU {
			for _, n := range v.Slots[:hist.NBuckets] {
				if int(key.Hook) < len(recorded) {
					recorded[key.Hook] += n
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	var out []Counter
	for _, h := range hooks {
		for r, reason := range Reasons {
			n, err := readCounter(m, h, latencyReason(r))
			if err != nil {
				return nil, err
			}
			if latencyReason(r) == reasonRecorded {
				n = recorded[h]
			}
			if n > 0 {
				out = append(out, Counter{Hook: t.hookName(h), Reason: reason, Count: n})
			}
		}
	}
	return out, nil
}

// readCounter sums one counter of the counters map over the CPUs.
func readCounter(m *ebpf.Map, h Hook, r latencyReason) (uint64, error) {
	var perCPU []uint64
	// The key of count() in the C: hook * N_REASONS + reason.
	if err := m.Lookup(uint32(int(h)*numReasons+int(r)), &perCPU); err != nil {
		return 0, fmt.Errorf("reading counters: %w", err)
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n, nil
}
