// SPDX-License-Identifier: Apache-2.0

// Package conntrack is the connection tracking engine behind `stacktop top`,
// `stream` and the Prometheus exporter: it loads bpf/conns.bpf.c, picks a
// backend per hook, and turns the kernel's per-socket and per-flow entries
// and its closed-connection events into conn.Snapshots.
package conntrack

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/attach"
	"github.com/stacktop/stacktop/internal/bpfmap"
	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/connfilter"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/kube"
)

// DefaultUDPIdle is how long a UDP flow may stay silent before it is
// reported closed.
const DefaultUDPIdle = 5 * time.Second

// Capacity of the kernel tables (--max-tracked, serve's --connections.max-tracked). The default holds
// 131,072 connections with both ends on this host (a loopback connection is
// two sockets); docs/CONNECTIONS.md lists the memory each size locks.
// MaxMaxConnections bounds what a typo can ask the kernel to reserve.
const (
	DefaultMaxConnections = 262144
	MinMaxConnections     = 1
	MaxMaxConnections     = 1 << 22
)

// Config chooses what the tracker attaches and reports.
type Config struct {
	UDPIdle time.Duration      // 0 means DefaultUDPIdle
	Filter  *connfilter.Filter // nil selects everything
	// MaxConnections is the number of entries of the kernel's TCP socket
	// table and of its UDP flow table (each); 0 means
	// DefaultMaxConnections. A socket or flow that finds its table full is
	// counted in Snapshot's MapFull and not tracked.
	MaxConnections int
	// Pods names the pod and container of each record's cgroup before the
	// filter sees it; nil names none.
	Pods *kube.Resolver
	// ReadWait fills each record's read-wait fields before the filter sees
	// it (internal/readwait); nil leaves them 0.
	ReadWait ReadWaitJoin
	// Backend forces the UDP hooks' implementation (--backend): fentry
	// programs or the cgroup_skb ones; "" or Auto prefers fentry.
	Backend features.Backend
	// Unordered leaves a snapshot's records in no particular order, for a
	// consumer that aggregates them: the tuple order every output shows
	// costs a sort, a fifth of the tracker's CPU time under connection
	// churn.
	Unordered bool
	// Hosts names the remote address of each record the filter selects
	// (--resolve; internal/resolve), without waiting for a lookup; nil
	// names none.
	Hosts HostNamer
}

// HostNamer names an address at once, "" while its name is unknown.
type HostNamer interface{ Name(netip.Addr) string }

// ValidMaxConnections reports why n cannot be a table size, or nil.
func ValidMaxConnections(n int) error {
	if n < MinMaxConnections || n > MaxMaxConnections {
		return fmt.Errorf("must be between %d and %d", MinMaxConnections, MaxMaxConnections)
	}
	return nil
}

// sizeMaps sets the table sizes of spec for n connections. The ring buffer
// of closed events keeps its compiled 4 MiB (about 29,000 events): it is drained
// as it fills, and a burst beyond that is counted as lost.
func sizeMaps(spec *ebpf.CollectionSpec, n int) error {
	if err := ValidMaxConnections(n); err != nil {
		return fmt.Errorf("max connections %d: %w", n, err)
	}
	var maps connsMapSpecs
	if err := spec.Assign(&maps); err != nil {
		return err
	}
	// owners (UDP socket owners, an LRU that evicts gracefully and is
	// preallocated) keeps its compiled size.
	maps.Conns.MaxEntries = uint32(n)
	maps.Flows.MaxEntries = uint32(n)
	return nil
}

// Tracker owns the loaded programs and the state needed between snapshots.
// Its methods are safe for concurrent use.
type Tracker struct {
	cfg     Config
	engine  *attach.Engine
	objs    connsMaps // the engine's maps
	closed  *closedCollector
	cgroups *cgroup.Resolver

	mu          sync.Mutex
	preexisting map[uint64]*preexisting // by socket cookie, until they close
	netns       namespaceSet
	last        time.Time
	scratch     scratch // what the last snapshot reported, and buffers
}

// Open loads and attaches the connection hooks and lists the connections
// that already exist. Close it to detach.
func Open(cfg Config) (*Tracker, error) {
	if cfg.UDPIdle == 0 {
		cfg.UDPIdle = DefaultUDPIdle
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	t := &Tracker{cfg: cfg, netns: namespaceSet{handles: map[uint32]netns.NsHandle{}, want: map[uint32]struct{}{}}}
	if err := t.open(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Probe attaches every connection hook, detaches them again and reports the
// backend each got or why none would attach (for doctor).
func Probe() ([]features.Choice, error) {
	t := &Tracker{cfg: Config{MaxConnections: DefaultMaxConnections}}
	defer t.Close()
	if err := t.loadMaps(); err != nil {
		return nil, err
	}
	err := t.attachHooks()
	return t.engine.Choices(), err
}

// loadMaps creates the maps every program of the object shares.
func (t *Tracker) loadMaps() error {
	// Before tracingCookie, which loads a program too.
	if err := features.RemoveMemlock(); err != nil {
		return err
	}
	spec, err := loadConns()
	if err != nil {
		return err
	}
	if err := sizeMaps(spec, t.cfg.MaxConnections); err != nil {
		return err
	}
	var vars connsVariableSpecs
	if err := spec.Assign(&vars); err != nil {
		return err
	}
	if err := vars.TracingCookie.Set(tracingCookie()); err != nil {
		return fmt.Errorf("%s: %w", vars.TracingCookie.Name, err)
	}
	if err := t.namespacesNoted(spec, &vars); err != nil {
		return err
	}
	if t.engine, err = attach.Load(spec, attach.Netns{}); err != nil {
		return fmt.Errorf("connection tracking: %w", err)
	}
	return t.engine.AssignMaps(&t.objs)
}

// namespacesNoted decides, before anything is loaded, whether new
// connections note their network namespace in netns_new, which serves
// conns_refresh_netns only: where tcp-counters will be that iterator
// (conns_refresh refused at its gate, the iterator not). Elsewhere the
// state programs leave the map alone (refresh_netns: the verifier removes
// the lookup from every new connection), and it keeps one entry. Should
// conns_refresh pass its gate and still be refused (its test run), the
// iterator runs without it: the namespaces it walks are then those of the
// last snapshot's entries, so a socket in a namespace new to the tracker
// shows live counters from its second refresh.
func (t *Tracker) namespacesNoted(spec *ebpf.CollectionSpec, vars *connsVariableSpecs) error {
	tcp, _ := t.cfg.Filter.Protocols()
	noted := tcp && refreshRuns() != nil && refreshIterates() == nil
	if err := vars.RefreshNetns.Set(noted); err != nil {
		return fmt.Errorf("%s: %w", vars.RefreshNetns.Name, err)
	}
	if !noted {
		spec.Maps[connsMapNetnsNew].MaxEntries = 1
	}
	return nil
}

func (t *Tracker) open() error {
	var err error
	if t.cgroups, err = cgroup.NewResolver(); err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	if err := t.loadMaps(); err != nil {
		return err
	}
	if t.closed, err = newClosedCollector(t.objs.Closed, t.cfg.MaxConnections); err != nil {
		return err
	}
	if err := t.attachHooks(); err != nil {
		return err
	}
	// Listed after attaching, so that no connection falls between the two:
	// one that closes in between is reported by the kernel.
	var udpOwners map[uint64]connsOwner
	t.preexisting, udpOwners = listPreexisting()
	if err := t.adoptPreexisting(); err != nil {
		return err
	}
	if err := t.ownPreexisting(); err != nil {
		return err
	}
	if err := t.seedListeners(); err != nil {
		return err
	}
	if err := t.seedUDPOwners(udpOwners); err != nil {
		return err
	}
	t.last = time.Now()
	return nil
}

// Choices reports the backend chosen for each hook and why others were refused.
func (t *Tracker) Choices() []features.Choice {
	if t.engine == nil {
		return nil
	}
	return t.engine.Choices()
}

// Close detaches every program and frees the maps.
func (t *Tracker) Close() error {
	var errs []error
	if t.closed != nil {
		errs = append(errs, t.closed.close())
	}
	t.netns.close()
	if t.engine != nil {
		errs = append(errs, t.engine.Close())
	}
	return errors.Join(errs...)
}

// Snapshot returns every live connection (event new on its first
// appearance, update afterwards), every connection that closed since the
// previous call (event closed, final totals, reported once), rates over the
// time since the previous call, and the cumulative loss counters.
func (t *Tracker) Snapshot() (conn.Snapshot, error) { return t.SnapshotInto(nil) }

// SnapshotInto is Snapshot with the records appended to records[:0]: a
// caller that refreshes often lends back the previous snapshot's slice once
// it is done with it, rather than leaving it (200 bytes a record) to the
// garbage collector every refresh.
func (t *Tracker) SnapshotInto(records []conn.Record) (conn.Snapshot, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	elapsed := now.Sub(t.last).Seconds()
	t.last = now
	s := &t.scratch
	s.begin()
	// Sized for as many records as the last refresh had, so that appending
	// them does not copy them over and over.
	snap := conn.Snapshot{Time: now, Records: slices.Grow(records[:0], s.selected+s.selected/8)}
	rw := t.cfg.ReadWait
	emit := func(r *conn.Record, prev totals, seen, closed bool) {
		r.TS = now
		switch {
		case closed:
			r.Event = conn.Closed
		case seen:
			r.Event = conn.Update
		default:
			r.Event = conn.New
		}
		if elapsed > 0 {
			r.RateIn = float64(r.BytesIn-min(prev.in, r.BytesIn)) / elapsed
			r.RateOut = float64(r.BytesOut-min(prev.out, r.BytesOut)) / elapsed
		}
		r.Names = t.cfg.Pods.Names(r.Cgroup)
		if rw != nil {
			rw.Fill(r)
		}
		if t.cfg.Filter.Match(r) {
			if t.cfg.Hosts != nil {
				r.RemoteHost = t.cfg.Hosts.Name(r.RemoteAddr)
			}
			snap.Records = append(snap.Records, *r)
		}
	}

	// Live entries first, then the closed events: a connection that closes
	// in between is then reported closed, not lost for one refresh.
	// The entries, with the kernel's current counters: conns_refresh
	// refreshes the entries read, conns_refresh_netns (where the kernel
	// refused the other) those about to be read.
	refresh := t.engine.Runnable(refreshProgram)
	if refresh == nil {
		if err := t.refreshEachNamespace(); err != nil {
			return snap, fmt.Errorf("refreshing connections: %w", err)
		}
	}
	var err error
	if s.cookies, s.conns, err = readAll(t.objs.Conns, s.cookies, s.conns); err != nil {
		return snap, fmt.Errorf("reading connections: %w", err)
	}
	if refresh != nil {
		if err := t.refreshEntries(refresh, s.cookies, s.conns); err != nil {
			return snap, fmt.Errorf("refreshing connections: %w", err)
		}
	}
	if err := t.ownAccepted(s.cookies, s.conns); err != nil {
		return snap, err
	}
	t.netns.keep(s.conns)
	if s.closed, err = t.closed.take(s.closed[:0]); err != nil {
		return snap, err
	}
	s.closed = append(s.closed, s.ghosts...)
	// After the closed events: every read of a socket closed by now is in
	// the read-wait histograms (a read-wait entry newer than the tables
	// waits for its socket's record at the next refresh).
	if rw != nil {
		if err := rw.Begin(); err != nil {
			return snap, err
		}
	}
	for i := range s.closed {
		c := &s.closed[i]
		r := t.tcpRecord(c)
		s.gone[c.Cookie] = struct{}{}
		delete(t.preexisting, c.Cookie)
		prev, seen := s.tcp.report(c.Cookie, &r, true, s.refresh)
		emit(&r, prev, seen, true)
	}
	for i := range s.conns {
		c := &s.conns[i]
		if _, closed := s.gone[c.Cookie]; closed {
			continue
		}
		if p := t.preexisting[c.Cookie]; p != nil {
			p.inKernel = s.refresh
		}
		// Between connect()'s move into SYN_SENT and the binding of its
		// local port, a socket is no connection anyone could name (nor
		// in the tables the refresh walks): the next refresh shows it.
		if c.Sport == 0 && c.State == tcpSynSent {
			continue
		}
		r := t.tcpRecord(c)
		prev, seen := s.tcp.report(c.Cookie, &r, false, s.refresh)
		emit(&r, prev, seen, false)
	}
	// In cookie order, not the map's random order: an unchanged table then
	// gives the same sequence of records every refresh (see scratch.sort).
	s.idle = s.idle[:0]
	for cookie, p := range t.preexisting {
		if p.inKernel != s.refresh {
			s.idle = append(s.idle, cookie)
		}
	}
	slices.Sort(s.idle)
	for _, cookie := range s.idle {
		r := t.preexisting[cookie].rec
		prev, seen := s.tcp.report(cookie, &r, false, s.refresh)
		emit(&r, prev, seen, false)
	}
	if err := t.udpFlows(emit); err != nil {
		return snap, err
	}
	s.tcp.forget(s.refresh)
	s.udp.forget(s.refresh)
	s.selected = len(snap.Records)
	if !t.cfg.Unordered {
		s.sort(snap.Records)
	}
	snap.Lost, snap.MapFull, err = t.drops()
	if rw != nil && err == nil {
		var full uint64
		full, err = rw.End()
		snap.MapFull += full
	}
	return snap, err
}

// ReadWaitJoin joins the read-wait histograms of the sockets to the records
// (internal/readwait): Begin before the tables are read, Fill for every
// record, End after, returning the samples that found its table full.
type ReadWaitJoin interface {
	Begin() error
	Fill(r *conn.Record)
	End() (mapFull uint64, err error)
}

// udpFlows reports every UDP flow; flows idle longer than UDPIdle are
// reported closed and removed from the kernel's map.
func (t *Tracker) udpFlows(emit func(*conn.Record, totals, bool, bool)) error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil { // bpf_ktime_get_ns's clock
		return err
	}
	nowNS := uint64(ts.Nano())
	s := &t.scratch
	var err error
	if s.flowKeys, s.flows, err = readAll(t.objs.Flows, s.flowKeys, s.flows); err != nil {
		return fmt.Errorf("reading UDP flows: %w", err)
	}
	var expired []connsFlowKey
	for i, k := range s.flowKeys {
		f := &s.flows[i]
		idle := nowNS > f.LastNs && time.Duration(nowNS-f.LastNs) > t.cfg.UDPIdle
		if idle {
			expired = append(expired, k)
		}
		r := t.udpRecord(&k, f)
		if p, ok := s.udp[k]; ok {
			// A datagram is counted at ingress and, when the socket then
			// drops it, moved to drops_in a moment later: a refresh in
			// between saw it received. Received counts never go down.
			r.BytesIn, r.PacketsIn = max(r.BytesIn, p.in), max(r.PacketsIn, p.packetsIn)
		}
		prev, seen := s.udp.report(k, &r, idle, s.refresh)
		emit(&r, prev, seen, idle)
	}
	for _, k := range expired {
		if err := t.objs.Flows.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("expiring UDP flow: %w", err)
		}
	}
	return nil
}

// readAll reads every entry of a hash map (bpfmap.ReadAll).
func readAll[K, V any](m *ebpf.Map, keys []K, values []V) ([]K, []V, error) {
	return bpfmap.ReadAll(m, keys, values)
}

// drops reads the loss counters. Lost counts closed-connection events the
// ring buffer or the collector had no room for, and runs of our programs
// the kernel skipped because the same program was already running on that
// CPU (interrupted by a softirq, or preempted by a task, that hit the hook
// again; 5.12+ counts them) and no other program made up for: each is an
// event whose bytes, owner or close the tracker never saw. State changes
// have a spare program; its own skipped runs are not losses, and the
// changes it applied are not either.
func (t *Tracker) drops() (lost, mapFull uint64, err error) {
	var sums [connsDropCounterDROP_NR]uint64
	for idx := range sums {
		var perCPU []uint64
		if err := t.objs.Drops.Lookup(connsDropCounter(idx), &perCPU); err != nil {
			return 0, 0, fmt.Errorf("reading drop counters: %w", err)
		}
		for _, v := range perCPU {
			sums[idx] += v
		}
	}
	var skipped uint64
	for _, a := range t.engine.Attached() {
		if spares[a.Name] {
			continue
		}
		s, err := a.Program.Stats()
		if err != nil {
			return 0, 0, fmt.Errorf("reading program statistics: %w", err)
		}
		skipped += s.RecursionMisses
	}
	// Never below zero: the counters are read one after the other while
	// programs run.
	skipped -= min(skipped, sums[connsDropCounterDROP_COVERED])
	return sums[connsDropCounterDROP_LOST] + t.closed.lost.Load() + skipped, sums[connsDropCounterDROP_MAP_FULL], nil
}
