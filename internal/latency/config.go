package latency

import (
	"cmp"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"

	"github.com/stacktop/stacktop/internal/features"
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
	MaxHistograms  uint32
	// Slow, when not 0, reports every packet whose latency at an enabled
	// hook exceeds it as a SlowEvent (ReadSlow); SlowLimit bounds those
	// events per second (0: no bound). Both count what they cannot deliver.
	Slow      time.Duration
	SlowLimit uint32
	// slowRingBytes sizes the event ring (tests make it small to fill it).
	slowRingBytes uint32
}

// defaultMaxHistograms bounds the (hook, iface, cgroup, process) combinations kept;
// beyond it new combinations are counted as "hist_full" and dropped.
const defaultMaxHistograms = 4096

// defaultSlowRingBytes holds about 2,500 slow events (96 bytes and an
// 8-byte header each): a burst that user space has not read yet.
const defaultSlowRingBytes = 256 << 10

// configure writes cfg into the BPF object before it is loaded: constants
// the verifier can prune on, and map sizes. taiClock and skStorageTracing
// say what the kernel offers tracing programs (see bpf/latency.bpf.c).
func configure(spec *ebpf.CollectionSpec, cfg Config, netnsInum uint32, taiClock, skStorageTracing bool) error {
	consts := map[string]any{
		"tai_clock":             taiClock,
		"sk_storage_in_tracing": skStorageTracing,
		"netns_inum":            netnsInum,
		"min_queue_len":         cfg.MinQueueLen,
		"filter_pid":            len(cfg.PIDs) > 0,
		"filter_ifindex":        len(cfg.Ifindexes) > 0,
		"filter_cgroup":         len(cfg.Cgroups) > 0,
		"group_by_ifindex":      cfg.GroupByIface,
		"read_ifindex":          len(cfg.Ifindexes) > 0 || cfg.GroupByIface || cfg.Slow > 0,
		"group_by_cgroup":       cfg.GroupByCgroup,
		"group_by_process":      cfg.GroupByProcess,
		"include_hol_blocked":   cfg.IncludeHOL,
		"slow_ns":               uint64(cfg.Slow),
		"slow_limit":            cfg.SlowLimit,
	}
	for name, v := range consts {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	sizes := map[string]int{
		"pid_filter":     len(cfg.PIDs),
		"ifindex_filter": len(cfg.Ifindexes),
		"cgroup_filter":  len(cfg.Cgroups),
	}
	for name, n := range sizes {
		spec.Maps[name].MaxEntries = uint32(max(n, 1))
	}
	spec.Maps["hists"].MaxEntries = cmp.Or(cfg.MaxHistograms, defaultMaxHistograms)
	if !cfg.GroupByIface && !cfg.GroupByCgroup && !cfg.GroupByProcess {
		spec.Maps["hists"].MaxEntries = 1 // unused: one histogram per hook, in hook_hists
	}
	spec.Maps[latencyMapSlowEvents].MaxEntries = uint32(os.Getpagesize()) // the smallest ring: unused
	if cfg.Slow > 0 {
		spec.Maps[latencyMapSlowEvents].MaxEntries = cmp.Or(cfg.slowRingBytes, defaultSlowRingBytes)
	}
	if skStorageTracing {
		spec.Maps["tcp_states_by_sock"].MaxEntries = 1 // unused
	}
	return nil
}

// fillFilters puts the filter values into the loaded maps.
func fillFilters(maps map[string]*ebpf.Map, cfg Config) error {
	one := uint8(1)
	for _, pid := range cfg.PIDs {
		if err := maps["pid_filter"].Put(pid, one); err != nil {
			return fmt.Errorf("pid filter: %w", err)
		}
	}
	for _, idx := range cfg.Ifindexes {
		if err := maps["ifindex_filter"].Put(idx, one); err != nil {
			return fmt.Errorf("interface filter: %w", err)
		}
	}
	for _, id := range cfg.Cgroups {
		if err := maps["cgroup_filter"].Put(id, one); err != nil {
			return fmt.Errorf("cgroup filter: %w", err)
		}
	}
	return nil
}
