package latency

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	cfeatures "github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/stacktop/stacktop/internal/features"
)

// fentryPlan lists, per hook, the programs that implement it on the fentry
// backend: netstacklat's own attachment points.
var fentryPlan = map[Hook][]string{
	IPStart:           {latencyProgFentryIpRcvCore, latencyProgFentryIp6RcvCore},
	TCPStart:          {latencyProgFentryTcpV4Rcv, latencyProgFentryTcpV6Rcv},
	UDPStart:          {latencyProgFentryUdpRcv, latencyProgFentryUdpv6Rcv},
	TCPSocketEnqueued: {latencyProgFexitTcpQueueRcv},
	UDPSocketEnqueued: {latencyProgFexitUdpEnqueueScheduleSkb},
	TCPSocketRead:     {latencyProgFentryTcpRecvTimestamp},
	UDPSocketRead:     {latencyProgFentrySkbConsumeUdp},
}

// ipv6Programs are the programs a hook can do without: on a kernel without
// IPv6 (or with the function inlined away) the hook still sees IPv4.
var ipv6Programs = map[string]bool{
	latencyProgFentryIp6RcvCore: true,
	latencyProgFentryTcpV6Rcv:   true,
	latencyProgFentryUdpv6Rcv:   true,
}

// tracepointPlan lists, per hook, the programs that implement it on the
// tracepoint backend. A program shared by several hooks is attached once.
var tracepointPlan = map[Hook][]string{
	IPStart:           {latencyProgNfIpStart},
	TCPStart:          {latencyProgNfL4Start},
	UDPStart:          {latencyProgNfL4Start},
	TCPSocketEnqueued: {latencyProgTpSkDataReady},
	UDPSocketEnqueued: {latencyProgTpSkDataReady},
	TCPSocketRead:     {latencyProgTpSkbCopyDatagramIovec, latencyProgTpSockRecvLength},
	UDPSocketRead:     {latencyProgTpSkDataReady, latencyProgTpSockRecvLength},
}

// programRuns says, per program, on what event it runs: what each probe
// costs per packet, for -l and docs/LATENCY.md.
var programRuns = map[string]string{
	latencyProgFentryIpRcvCore:            "IPv4 packet",
	latencyProgFentryIp6RcvCore:           "IPv6 packet",
	latencyProgFentryTcpV4Rcv:             "IPv4 TCP segment",
	latencyProgFentryTcpV6Rcv:             "IPv6 TCP segment",
	latencyProgFentryUdpRcv:               "IPv4 UDP datagram",
	latencyProgFentryUdpv6Rcv:             "IPv6 UDP datagram",
	latencyProgFexitTcpQueueRcv:           "TCP segment queued",
	latencyProgFexitUdpEnqueueScheduleSkb: "UDP datagram queued",
	latencyProgFentryTcpRecvTimestamp:     "stamped TCP read",
	latencyProgFentrySkbConsumeUdp:        "UDP read",
	latencyProgNfIpStart:                  "packet",
	latencyProgNfL4Start:                  "packet delivered locally",
	latencyProgTpSkDataReady:              "socket wakeup",
	latencyProgTpSkbCopyDatagramIovec:     "skb read",
	latencyProgTpSockRecvLength:           "read",
}

// Program is one BPF program of a probe and the event it runs on; a program
// serving several probes runs once for all of them.
type Program struct {
	Name    string `json:"name"`
	RunsPer string `json:"runs_per"`
}

// Programs lists the programs that implement h on backend b.
func Programs(h Hook, b features.Backend) []Program {
	plan := map[features.Backend]map[Hook][]string{features.FentryBE: fentryPlan, features.Tracepoint: tracepointPlan}[b]
	var out []Program
	for _, name := range plan[h] {
		out = append(out, Program{Name: name, RunsPer: programRuns[name]})
	}
	return out
}

// backendIDs are the values of enum backend of the BPF program: a hook
// records samples only in programs of the backend it chose.
var backendIDs = map[features.Backend]latencyBackend{
	features.Tracepoint: latencyBackendBACKEND_TRACEPOINT,
	features.FentryBE:   latencyBackendBACKEND_FENTRY,
}

// netfilterHooks places the netfilter programs: ip-start as early as possible
// in PRE_ROUTING, tcp/udp-start as late as possible in LOCAL_IN.
var netfilterHooks = map[string]struct {
	hook     link.NetfilterInetHook
	priority int32
}{
	latencyProgNfIpStart: {link.NetfilterInetPreRouting, nfFirst},
	latencyProgNfL4Start: {link.NetfilterInetLocalIn, nfLast},
}

// Tracer owns the loaded programs, their attachments and the histograms.
type Tracer struct {
	spec     *ebpf.CollectionSpec
	backend  features.Backend
	maps     map[string]*ebpf.Map
	noMaps   map[string]error // maps of a type this kernel lacks, and why
	taiClock bool             // bpf_ktime_get_tai_ns is available
	scope    netnsScope
	rxStamps *rxTimestamping
	choices  []features.Choice

	attachMu sync.Mutex // guards attached; held while entering namespaces
	attached map[string]attachment
	mapsMu   sync.RWMutex // Read and Counters against close
	cgroups  *cgroupNamer
	// byProcess: series carry pid and comm (Config.GroupByProcess)
	byProcess bool
	slow      *slowReader // nil without Config.Slow

	readWaitScratch readWaitScratch // ReadWaits' memory

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Start loads the BPF object configured by cfg, turns RX software
// timestamping on and attaches every enabled hook with the first backend that
// works. On error nothing stays attached or loaded.
func Start(cfg Config) (*Tracer, error) {
	t, err := open(cfg)
	if err != nil {
		return nil, err
	}
	for _, h := range Hooks {
		if !cfg.Hooks.Has(h) {
			continue
		}
		c, err := features.Choose(h.String(), t.backend, t.candidates(h)...)
		t.choices = append(t.choices, c)
		if err == nil {
			err = t.maps[latencyMapHookBackends].Put(latencyHook(h), backendIDs[c.Backend])
		}
		if err != nil {
			t.close()
			return nil, err
		}
		slog.Info("hook attached", "hook", h, "backend", c.Backend)
	}
	go t.maintain()
	return t, nil
}

// Probe attaches every hook, detaches it again and reports the backend each
// got or why none would attach (for -l and doctor).
func Probe(backend features.Backend) ([]features.Choice, error) {
	t, err := open(Config{Hooks: AllHooks, Backend: backend})
	if err != nil {
		return nil, err
	}
	defer t.close()
	var choices []features.Choice
	var errs []error
	for _, h := range Hooks {
		c, err := features.Choose(h.String(), t.backend, t.candidates(h)...)
		choices = append(choices, c)
		errs = append(errs, err)
	}
	return choices, errors.Join(errs...)
}

// open loads the maps and prepares everything but the hooks.
func open(cfg Config) (_ *Tracer, err error) {
	cfg.Backend = cmp.Or(cfg.Backend, features.Auto)
	if err := features.RemoveMemlock(); err != nil {
		return nil, err
	}
	spec, err := loadLatency()
	if err != nil {
		return nil, fmt.Errorf("reading BPF object: %w", err)
	}
	own, err := ownNetns()
	if err != nil {
		return nil, err
	}
	if cfg.Netns > 0 {
		if _, err := netnsPath(uint64(cfg.Netns)); err != nil {
			return nil, err
		}
	}
	t := &Tracer{spec: spec, backend: cfg.Backend, scope: netnsScope{mode: cfg.Netns, own: own},
		taiClock: features.Check(features.KtimeTAI).OK,
		attached: map[string]attachment{}, stop: make(chan struct{}), done: make(chan struct{})}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	if err := configure(spec, cfg, t.scope.bpfFilter(), t.taiClock, features.Check(features.SkStorageBTF).OK); err != nil {
		return nil, err
	}
	if t.maps, t.noMaps, err = loadMaps(spec); err != nil {
		return nil, err
	}
	if err := fillFilters(t.maps, cfg); err != nil {
		return nil, err
	}
	if err := t.refreshClock(); err != nil {
		return nil, err
	}
	if t.rxStamps, err = enableRXTimestamping(); err != nil {
		return nil, err
	}
	t.cgroups = newCgroupNamer()
	t.byProcess = cfg.GroupByProcess
	if cfg.Slow > 0 {
		ring, err := ringbuf.NewReader(t.maps[latencyMapSlowEvents])
		if err != nil {
			return nil, fmt.Errorf("slow-event ring buffer: %w", err)
		}
		t.slow = &slowReader{ring: ring, names: newIfaceNamer(own)}
	}
	return t, nil
}

// candidates lists the ways to implement h, in order of preference: fentry
// first (parity with netstacklat, and cheaper per packet), then tracepoints.
func (t *Tracer) candidates(h Hook) []features.Candidate {
	return []features.Candidate{
		{Backend: features.FentryBE, Attach: func() error { return t.acquire(h, fentryPlan[h]) }},
		{Backend: features.Tracepoint, Attach: func() error { return t.acquire(h, tracepointPlan[h]) }},
	}
}

// acquire attaches the named programs of hook h that are not attached yet.
// On failure it detaches what it attached itself and leaves the others
// alone; an IPv6 program that fails only costs the hook its IPv6 half.
func (t *Tracer) acquire(h Hook, progs []string) error {
	t.attachMu.Lock()
	defer t.attachMu.Unlock()
	var fresh []string
	for _, name := range progs {
		if _, ok := t.attached[name]; ok {
			continue
		}
		a, err := t.attach(name)
		if err != nil && ipv6Programs[name] && len(fresh) > 0 {
			slog.Warn("hook attached for IPv4 only", "hook", h, "program", name, "err", err)
			continue
		}
		if err != nil {
			for _, f := range fresh {
				t.attached[f].Close()
				delete(t.attached, f)
			}
			return err
		}
		t.attached[name] = a
		fresh = append(fresh, name)
	}
	return nil
}

func (t *Tracer) attach(name string) (attachment, error) {
	prog, err := loadProgram(t.spec, name, t.maps, t.noMaps)
	if err != nil {
		return nil, err
	}
	var a attachment
	if nf, ok := netfilterHooks[name]; ok {
		a, err = newNetfilterAttachment(prog, nf.hook, nf.priority, &t.scope)
	} else {
		a, err = attachTracing(prog)
	}
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("program %s: %w", name, err)
	}
	return a, nil
}

// loadMaps creates every map of the object once; programs loaded later share
// them. A map of a type the kernel lacks is left out with the reason: only
// the programs that use it cannot load. (Every map type the object has
// today exists since 5.2; the task storage map that needed this, 5.11+, is
// gone.)
func loadMaps(spec *ebpf.CollectionSpec) (map[string]*ebpf.Map, map[string]error, error) {
	mapsOnly := spec.Copy()
	mapsOnly.Programs = nil
	missing := map[string]error{}
	for name, m := range mapsOnly.Maps {
		if err := cfeatures.HaveMapType(m.Type); errors.Is(err, ebpf.ErrNotSupported) {
			missing[name] = err
			delete(mapsOnly.Maps, name)
		}
	}
	coll, err := ebpf.NewCollection(mapsOnly)
	if err != nil {
		return nil, nil, fmt.Errorf("creating BPF maps: %w", err)
	}
	return coll.Maps, missing, nil
}

// kernelBTF is the kernel's BTF, decoded once per process: without a shared
// cache every program load decodes (copies) all of vmlinux's types again,
// which dominated start-up on emulated guests.
var kernelBTF = btf.NewCache()

// loadProgram loads one program against the shared maps, so a program the
// kernel refuses (a backend it does not allow) does not take the others down.
func loadProgram(spec *ebpf.CollectionSpec, name string, maps map[string]*ebpf.Map, missing map[string]error) (*ebpf.Program, error) {
	one := spec.Copy()
	one.Programs = map[string]*ebpf.ProgramSpec{name: spec.Programs[name]}
	for _, ins := range one.Programs[name].Instructions {
		if err, ok := missing[ins.Reference()]; ok {
			return nil, fmt.Errorf("program %s: map %s: %w", name, ins.Reference(), err)
		}
	}
	for m := range missing {
		delete(one.Maps, m)
	}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: maps, Cache: kernelBTF})
	if err != nil {
		return nil, err // names the program
	}
	defer coll.Close()
	return coll.DetachProgram(name), nil
}

// Choices reports the backend chosen for each enabled hook and why others were refused.
func (t *Tracer) Choices() []features.Choice { return t.choices }

// maintainEvery is how often the clock offset is refreshed and, with -n -1,
// namespaces created or destroyed since are attached to or released.
const maintainEvery = 2 * time.Second

func (t *Tracer) maintain() {
	defer close(t.done)
	tick := time.NewTicker(maintainEvery)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			if err := t.refreshClock(); err != nil {
				slog.Warn("refreshing the clock offset", "err", err)
			}
			t.followNamespaces()
		}
	}
}

func (t *Tracer) followNamespaces() {
	if t.scope.mode == OwnNetns {
		return
	}
	t.attachMu.Lock()
	defer t.attachMu.Unlock()
	for _, a := range t.attached {
		if nf, ok := a.(*netfilterAttachment); ok {
			_ = nf.sync(&t.scope, false)
		}
	}
}

// Close detaches and unloads everything and turns RX timestamping back off
// (unless another socket on the host still wants it).
func (t *Tracer) Close() error {
	t.closeOnce.Do(func() {
		close(t.stop)
		<-t.done
		t.closeErr = t.close()
	})
	return t.closeErr
}

func (t *Tracer) close() error {
	t.attachMu.Lock()
	defer t.attachMu.Unlock()
	t.mapsMu.Lock()
	defer t.mapsMu.Unlock()
	var errs []error
	names := make([]string, 0, len(t.attached))
	for n := range t.attached {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		errs = append(errs, t.attached[n].Close())
		delete(t.attached, n)
	}
	if t.slow != nil {
		errs = append(errs, t.slow.ring.Close())
	}
	for _, m := range t.maps {
		errs = append(errs, m.Close())
	}
	t.maps = nil
	if t.rxStamps != nil {
		errs = append(errs, t.rxStamps.Close())
		t.rxStamps = nil
	}
	return errors.Join(errs...)
}
