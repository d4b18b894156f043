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
	"github.com/cilium/ebpf/link"

	"github.com/stacktop/stacktop/internal/features"
)

// tracepointPlan lists, per hook, the programs that implement it on the
// tracepoint backend. A program shared by several hooks is attached once.
// The fentry backend will add its own plan and candidate (see candidates).
var tracepointPlan = map[Hook][]string{
	IPStart:           {"nf_ip_start"},
	TCPStart:          {"nf_l4_start"},
	UDPStart:          {"nf_l4_start"},
	TCPSocketEnqueued: {"tp_sk_data_ready"},
	UDPSocketEnqueued: {"tp_sk_data_ready"},
	TCPSocketRead:     {"tp_skb_copy_datagram_iovec", "tp_sock_recv_length"},
	UDPSocketRead:     {"tp_sk_data_ready", "tp_sock_recv_length"},
}

// backendIDs are the BACKEND_* values of the BPF program: a hook records
// samples only in programs of the backend it chose.
var backendIDs = map[features.Backend]uint32{features.Tracepoint: 1}

// netfilterHooks places the netfilter programs: ip-start as early as possible
// in PRE_ROUTING, tcp/udp-start as late as possible in LOCAL_IN.
var netfilterHooks = map[string]struct {
	hook     link.NetfilterInetHook
	priority int32
}{
	"nf_ip_start": {link.NetfilterInetPreRouting, nfFirst},
	"nf_l4_start": {link.NetfilterInetLocalIn, nfLast},
}

// Tracer owns the loaded programs, their attachments and the histograms.
type Tracer struct {
	spec     *ebpf.CollectionSpec
	backend  features.Backend
	maps     map[string]*ebpf.Map
	scope    netnsScope
	rxStamps *rxTimestamping
	choices  []features.Choice

	attachMu sync.Mutex // guards attached; held while entering namespaces
	attached map[string]attachment
	mapsMu   sync.RWMutex // Read and Counters against close
	cgroups  *cgroupNamer

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
			err = t.maps["hook_backends"].Put(uint32(h), backendIDs[c.Backend])
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
		attached: map[string]attachment{}, stop: make(chan struct{}), done: make(chan struct{})}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	if err := configure(spec, cfg, t.scope.bpfFilter()); err != nil {
		return nil, err
	}
	if t.maps, err = loadMaps(spec); err != nil {
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
	return t, nil
}

// candidates lists the ways to implement h, in order of preference. The
// fentry backend (parity with netstacklat) goes first once it exists.
func (t *Tracer) candidates(h Hook) []features.Candidate {
	return []features.Candidate{
		{Backend: features.Tracepoint, Attach: func() error { return t.acquire(tracepointPlan[h]) }},
	}
}

// acquire attaches the named programs that are not attached yet. On failure
// it detaches what it attached itself and leaves the others alone.
func (t *Tracer) acquire(progs []string) error {
	t.attachMu.Lock()
	defer t.attachMu.Unlock()
	var fresh []string
	for _, name := range progs {
		if _, ok := t.attached[name]; ok {
			continue
		}
		a, err := t.attach(name)
		if err != nil {
			for _, f := range fresh {
				t.attached[f].Close()
				delete(t.attached, f)
			}
			return fmt.Errorf("%s: %w", name, err)
		}
		t.attached[name] = a
		fresh = append(fresh, name)
	}
	return nil
}

func (t *Tracer) attach(name string) (attachment, error) {
	prog, err := loadProgram(t.spec, name, t.maps)
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
		return nil, err
	}
	return a, nil
}

// loadMaps creates every map of the object once; programs loaded later share them.
func loadMaps(spec *ebpf.CollectionSpec) (map[string]*ebpf.Map, error) {
	mapsOnly := spec.Copy()
	mapsOnly.Programs = nil
	coll, err := ebpf.NewCollection(mapsOnly)
	if err != nil {
		return nil, fmt.Errorf("creating BPF maps: %w", err)
	}
	return coll.Maps, nil
}

// loadProgram loads one program against the shared maps, so a program the
// kernel refuses (a backend it does not allow) does not take the others down.
func loadProgram(spec *ebpf.CollectionSpec, name string, maps map[string]*ebpf.Map) (*ebpf.Program, error) {
	one := spec.Copy()
	one.Programs = map[string]*ebpf.ProgramSpec{name: spec.Programs[name]}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: maps})
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", name, err)
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
				slog.Warn("refreshing the TAI offset", "err", err)
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
