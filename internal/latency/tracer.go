// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/stacktop/stacktop/internal/attach"
	"github.com/stacktop/stacktop/internal/features"
)

// Program is one BPF program of a probe and the event it runs on; a program
// serving several probes runs once for all of them.
type Program struct {
	Name    string `json:"name"`
	RunsPer string `json:"runs_per"`
}

// Programs lists the programs that implement h on backend b.
func Programs(h Hook, b features.Backend) []Program {
	var out []Program
	for _, p := range table[h].Programs(b) {
		out = append(out, Program{Name: p.Name, RunsPer: p.RunsPer})
	}
	return out
}

// backendIDs are the values of enum backend of the BPF program: a hook
// records samples only in programs of the backend it chose.
var backendIDs = map[features.Backend]latencyBackend{
	features.Tracepoint: latencyBackendBACKEND_TRACEPOINT,
	features.FentryBE:   latencyBackendBACKEND_FENTRY,
}

// Tracer owns the loaded programs, their attachments and the histograms.
type Tracer struct {
	engine   *attach.Engine
	objs     latencyMaps // the engine's maps; zero once closed
	backend  features.Backend
	at       []At // hooks numHooks and up
	taiClock bool // bpf_ktime_get_tai_ns is available
	scope    netnsScope
	rxStamps *rxTimestamping
	nic      *nicClocks // the nic hook's conversions; nil when it is off

	mapsMu  sync.RWMutex // Read and Counters against close
	cgroups *cgroupNamer
	// byProcess: series carry pid and comm (Config.GroupByProcess)
	byProcess   bool
	sampleEvery uint32      // Config.SampleEvery
	slow        *slowReader // nil without Config.Slow

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
	if cfg.Hooks.Has(NIC) {
		if err := t.startNICClocks(cfg.Ifindexes); err != nil {
			t.close()
			return nil, err
		}
	}
	for _, h := range Hooks {
		if !cfg.Hooks.Has(h) {
			continue
		}
		c, err := t.engine.Attach(&table[h], h.backendFor(t.backend))
		if err == nil {
			err = t.objs.HookBackends.Put(latencyHook(h), backendIDs[c.Backend])
		}
		if err != nil {
			t.close()
			return nil, err
		}
		slog.Info("hook attached", "hook", h, "backend", c.Backend)
	}
	if err := t.attachAt(); err != nil {
		t.close()
		return nil, err
	}
	go t.maintain()
	return t, nil
}

// attachAt attaches the --at probes, each with the one backend its point
// needs (--backend chooses for the built-in probes only). A probe's
// program records its own hook only: hook_backends is not consulted.
func (t *Tracer) attachAt() error {
	var errs []error
	for i, a := range t.at {
		h := a.hook(numHooks + Hook(i))
		c, err := t.engine.Attach(&h, features.Auto)
		errs = append(errs, err)
		if err == nil {
			slog.Info("hook attached", "hook", a, "backend", c.Backend)
		}
	}
	return errors.Join(errs...)
}

// hooks lists the hook ids in use: the built-in ones, then the --at probes'.
func (t *Tracer) hooks() []Hook {
	hs := slices.Clone(Hooks)
	for i := range t.at {
		hs = append(hs, numHooks+Hook(i))
	}
	return hs
}

// hookName names a hook: a built-in one by its name, an --at probe by its
// spec.
func (t *Tracer) hookName(h Hook) string {
	if i := int(h) - int(numHooks); i >= 0 && i < len(t.at) {
		return t.at[i].String()
	}
	return h.String()
}

// Probe attaches every hook and the --at probes given, detaches them again
// and reports the backend each got or why none would attach (for -l and
// doctor), in that order.
func Probe(backend features.Backend, at ...At) ([]features.Choice, error) {
	t, err := open(Config{Hooks: AllHooks, Backend: backend, At: at})
	if err != nil {
		return nil, err
	}
	defer t.close()
	var errs []error
	for _, h := range Hooks {
		_, err := t.engine.Attach(&table[h], h.backendFor(t.backend))
		errs = append(errs, err)
	}
	errs = append(errs, t.attachAt())
	return t.engine.Choices(), errors.Join(errs...)
}

// open loads the maps and prepares everything but the hooks.
func open(cfg Config) (_ *Tracer, err error) {
	cfg.Backend = cmp.Or(cfg.Backend, features.Auto)
	// Before the feature checks below, which load programs too.
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
	if len(cfg.At) > MaxAt {
		return nil, fmt.Errorf("%d --at probes, at most %d", len(cfg.At), MaxAt)
	}
	if cfg.SampleEvery > 1 && cfg.ReadWait {
		return nil, fmt.Errorf("sampling 1 in %d packets leaves reads out of read wait, which adds up every read", cfg.SampleEvery)
	}
	t := &Tracer{backend: cfg.Backend, at: cfg.At, scope: netnsScope{mode: cfg.Netns, own: own},
		taiClock: features.Check(features.KtimeTAI).OK, stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.SampleEvery > 1 {
		t.sampleEvery = cfg.SampleEvery
	}
	// Checked only where a TCP read is recorded: the check costs a pause.
	readClock := (cfg.Hooks.Has(TCPSocketRead) || cfg.ReadWait) && tcpReadClock().Cached
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	if err := configure(spec, cfg, t.scope.bpfFilter(), kernelFacts{taiClock: t.taiClock, tcpReadClock: readClock,
		skStorageTracing: features.Check(features.SkStorageBTF).OK}); err != nil {
		return nil, err
	}
	scope := attach.Netns{Own: own, Members: t.scope.members, Follow: cfg.Netns == AllNetns}
	if t.engine, err = attach.Load(spec, scope); err != nil {
		return nil, err
	}
	if err := t.engine.AssignMaps(&t.objs); err != nil {
		return nil, err
	}
	if err := fillFilters(&t.objs, cfg); err != nil {
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
		ring, err := ringbuf.NewReader(t.objs.SlowEvents)
		if err != nil {
			return nil, fmt.Errorf("slow-event ring buffer: %w", err)
		}
		t.slow = &slowReader{ring: ring, names: newIfaceNamer(own)}
	}
	return t, nil
}

// Choices reports the backend chosen for each enabled hook and why others were refused.
func (t *Tracer) Choices() []features.Choice { return t.engine.Choices() }

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
			if t.nic != nil {
				if err := t.nic.refresh(&t.objs); err != nil {
					slog.Warn("refreshing a NIC clock's conversion", "err", err)
				}
			}
			t.engine.Resync()
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
	t.mapsMu.Lock()
	defer t.mapsMu.Unlock()
	var errs []error
	if t.slow != nil {
		errs = append(errs, t.slow.ring.Close())
	}
	if t.engine != nil {
		errs = append(errs, t.engine.Close())
	}
	t.objs = latencyMaps{}
	if t.rxStamps != nil {
		errs = append(errs, t.rxStamps.Close())
		t.rxStamps = nil
	}
	if t.nic != nil {
		t.nic.close()
	}
	return errors.Join(errs...)
}
