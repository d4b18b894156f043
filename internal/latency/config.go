// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"cmp"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"

	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/selector"
)

// Network namespace selections besides an inode number (netstacklat's -n).
const (
	OwnNetns int64 = 0  // the namespace stacktop runs in
	AllNetns int64 = -1 // every namespace, following new ones
)

// Config selects what the tracer measures; the zero value of each filter
// means "no filter".
type Config struct {
	Hooks         HookSet
	Backend       features.Backend
	PIDs          []uint32 // socket-read hooks only, as in netstacklat
	Ifindexes     []uint32
	Cgroups       []uint64 // socket-read hooks only (cgroup of the reading task)
	Netns         int64    // OwnNetns, AllNetns or a namespace inode
	MinQueueLen   uint32   // socket-read hooks only
	GroupByIface  bool
	GroupByCgroup bool
	// GroupByProcess groups the socket-read hooks by the reading process
	// (pid and comm); the other hooks run in softirq context, where the
	// current task is unrelated, and keep pid 0.
	GroupByProcess bool
	IncludeHOL     bool // include TCP reads that may have waited for a lost segment
	// SampleEvery, above 1, records each packet (each read, at the
	// socket-read probes) with probability 1/SampleEvery, decided before
	// anything about it is read: the histograms count samples, not packets
	// (hist.Series.SampleEvery says so). Not with ReadWait, whose
	// per-connection histograms add up every read.
	SampleEvery   uint32
	MaxHistograms uint32
	// Slow, when not 0, reports every packet whose latency at an enabled
	// hook exceeds it as a SlowEvent (ReadSlow); SlowLimit bounds those
	// events per second (0: no bound). Both count what they cannot deliver.
	Slow      time.Duration
	SlowLimit uint32
	// ReadWait also adds every socket-read sample to a histogram of its
	// socket (ReadWaits), for the connection table's read wait; MaxSockets
	// bounds those sockets (0: DefaultMaxSockets), a full table counting
	// the samples it cannot hold as read_wait_full. The socket-read filters
	// (PIDs, Cgroups, Ifindexes, Netns, MinQueueLen) do not apply to it.
	ReadWait   bool
	MaxSockets uint32
	// At are probes the user names (--at), recorded as hooks after the
	// built-in ones; at most MaxAt, each at a different point.
	At []At
	// slowRingBytes sizes the event ring (tests make it small to fill it).
	slowRingBytes uint32
	// noCookieHelper keys read wait as on kernels before 5.12 (tests).
	noCookieHelper bool
}

// Select applies a selection (-p, -c, -i, -n): the reading processes and
// cgroups, the interfaces by index and the namespaces, as the kernel filters
// them.
func (c *Config) Select(sel selector.Selection) {
	c.PIDs, c.Ifindexes, c.Cgroups = sel.PIDs, nil, nil
	for _, ifc := range sel.Interfaces {
		c.Ifindexes = append(c.Ifindexes, uint32(ifc.Index))
	}
	for _, cg := range sel.Cgroups {
		c.Cgroups = append(c.Cgroups, cg.ID)
	}
	switch {
	case sel.Netns.All:
		c.Netns = AllNetns
	case sel.Netns.Own:
		c.Netns = OwnNetns
	default:
		c.Netns = int64(sel.Netns.Inode)
	}
}

// defaultMaxHistograms bounds the (hook, iface, cgroup, process) combinations kept;
// beyond it new combinations are counted as "hist_full" and dropped.
const defaultMaxHistograms = 4096

// defaultSlowRingBytes holds about 1,600 slow events (152 bytes and an
// 8-byte header each): a burst that user space has not read yet.
const defaultSlowRingBytes = 256 << 10

// slowTrails is the number of slots in which --slow keeps packets'
// latencies at the hooks before the socket reads (56 bytes each: 896 KiB),
// so that an event names the earlier hooks' latencies of a packet, unless
// a newer packet took its slot (direct-mapped: a power of two). A packet
// keeps its slot while k newer ones arrive with a chance of about
// e^(-k/16384): 94 % for 1,000. Measured on this VM, 4,096 slots cost a
// packet 160-180 ns at its first earlier hook, 16,384 280-300 ns, 65,536
// 240-400 ns (the slot's cache line; docs/LATENCY.md).
const slowTrails = 1 << 14

// trailMask is the value of trail_mask: slow_trails has slowTrails slots
// with --slow, else one (unused).
func trailMask(cfg Config) uint32 {
	if cfg.Slow > 0 {
		return slowTrails - 1
	}
	return 0
}

// kernelFacts are what the running kernel offers the programs, as configure
// writes it into the object (see bpf/record.h).
type kernelFacts struct {
	taiClock         bool // bpf_ktime_get_tai_ns
	skStorageTracing bool // bpf_sk_storage_get in tracing programs
	tcpReadClock     bool // tcpReadClock()
}

// configure writes cfg into the BPF object before it is loaded: constants
// the verifier can prune on, and map sizes.
func configure(spec *ebpf.CollectionSpec, cfg Config, netnsInum uint32, kernel kernelFacts) error {
	var s latencySpecs
	if err := spec.Assign(&s); err != nil {
		return err
	}
	consts := []struct {
		v     *ebpf.VariableSpec
		value any
	}{
		{s.TaiClock, kernel.taiClock},
		{s.SkStorageInTracing, kernel.skStorageTracing},
		{s.TcpReadClock, kernel.tcpReadClock},
		{s.NetnsInum, netnsInum},
		{s.MinQueueLen, cfg.MinQueueLen},
		{s.FilterPid, len(cfg.PIDs) > 0},
		{s.FilterIfindex, len(cfg.Ifindexes) > 0},
		{s.FilterCgroup, len(cfg.Cgroups) > 0},
		{s.GroupByIfindex, cfg.GroupByIface},
		{s.GroupByNetns, cfg.GroupByIface && cfg.Netns == AllNetns},
		{s.ReadIfindex, len(cfg.Ifindexes) > 0 || cfg.GroupByIface || cfg.Slow > 0},
		{s.GroupByCgroup, cfg.GroupByCgroup},
		{s.GroupByProcess, cfg.GroupByProcess},
		{s.IncludeHolBlocked, cfg.IncludeHOL},
		{s.SampleThreshold, sampleThreshold(cfg.SampleEvery)},
		{s.SlowNs, uint64(cfg.Slow)},
		{s.SlowLimit, cfg.SlowLimit},
		{s.TrailMask, trailMask(cfg)},
		// Read wait: off, the verifier removes all of it.
		{s.ReadWait, cfg.ReadWait},
		{s.ReadWaitCookieHelper, readWaitCookieHelper(cfg)},
	}
	for _, c := range consts {
		if err := c.v.Set(c.value); err != nil {
			return fmt.Errorf("setting %s: %w", c.v.Name, err)
		}
	}
	// The --at probes' hooks follow the built-in ones.
	nHooks := uint32(numHooks) + uint32(len(cfg.At))
	s.HookHists.MaxEntries = nHooks
	s.Counters.MaxEntries = nHooks * uint32(numReasons)
	s.PidFilter.MaxEntries = uint32(max(len(cfg.PIDs), 1))
	s.IfindexFilter.MaxEntries = uint32(max(len(cfg.Ifindexes), 1))
	s.CgroupFilter.MaxEntries = uint32(max(len(cfg.Cgroups), 1))
	s.Hists.MaxEntries = cmp.Or(cfg.MaxHistograms, defaultMaxHistograms)
	if !cfg.GroupByIface && !cfg.GroupByCgroup && !cfg.GroupByProcess {
		s.Hists.MaxEntries = 1 // unused: one histogram per hook, in hook_hists
	}
	s.SlowEvents.MaxEntries = uint32(os.Getpagesize()) // the smallest ring: unused
	if cfg.Slow > 0 {
		s.SlowEvents.MaxEntries = cmp.Or(cfg.slowRingBytes, defaultSlowRingBytes)
		s.SlowTrails.MaxEntries = trailMask(cfg) + 1
	}
	s.ReadWaits.MaxEntries = readWaitSockets(cfg)
	if kernel.skStorageTracing {
		s.TcpStatesBySock.MaxEntries = 1 // unused
	}
	return nil
}

// sampleThreshold is the value of sample_threshold: a packet is recorded
// when a random 32-bit number is below it, so with probability 1/every.
func sampleThreshold(every uint32) uint32 {
	if every <= 1 {
		return 0
	}
	return uint32((1 << 32) / uint64(every))
}

// fillFilters puts the filter values into the loaded maps.
func fillFilters(maps *latencyMaps, cfg Config) error {
	one := uint8(1)
	for _, pid := range cfg.PIDs {
		if err := maps.PidFilter.Put(pid, one); err != nil {
			return fmt.Errorf("pid filter: %w", err)
		}
	}
	for _, idx := range cfg.Ifindexes {
		if err := maps.IfindexFilter.Put(idx, one); err != nil {
			return fmt.Errorf("interface filter: %w", err)
		}
	}
	for _, id := range cfg.Cgroups {
		if err := maps.CgroupFilter.Put(id, one); err != nil {
			return fmt.Errorf("cgroup filter: %w", err)
		}
	}
	return nil
}
