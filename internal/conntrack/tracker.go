// Package conntrack is the connection tracking engine behind `stacktop top`,
// `stream` and the Prometheus exporter: it loads bpf/conns.bpf.c, picks a
// backend per hook, and turns the kernel's per-socket and per-flow entries
// and its closed-connection events into conn.Snapshots.
package conntrack

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/connfilter"
	"github.com/stacktop/stacktop/internal/features"
)

// DefaultUDPIdle is how long a UDP flow may stay silent before it is
// reported closed.
const DefaultUDPIdle = 5 * time.Second

// flagPartial mirrors CONN_PARTIAL in bpf/conns.bpf.c.
const flagPartial = 1

// Indexes of the drops map (enum drop_counter in bpf/conns.bpf.c).
const (
	dropLost     = 0
	dropMapFull  = 1
	dropDeferred = 2
	dropCovered  = 3
	dropCounters = 4
)

// Capacity of the kernel tables (--max-connections). The default holds
// 131,072 connections with both ends on this host (a loopback connection is
// two sockets); docs/CONNECTIONS.md lists the memory each size locks.
// MaxMaxConnections bounds what a typo can ask the kernel to reserve.
const (
	DefaultMaxConnections = 262144
	MinMaxConnections     = 1
	MaxMaxConnections     = 1 << 22
)

// Ring buffer bounds: closedRecordSize is one closed event (struct conn,
// 120 bytes, plus the ring's 8-byte header); the ring is sized for one
// event per table entry, a power of two of pages, within these bounds.
const (
	closedRecordSize = 128
	minRingBytes     = 4 << 20
	maxRingBytes     = 256 << 20
)

// Config chooses what the tracker attaches and reports.
type Config struct {
	Backend features.Backend   // per-hook backend; "" means auto
	UDPIdle time.Duration      // 0 means DefaultUDPIdle
	Filter  *connfilter.Filter // nil selects everything
	// MaxConnections is the number of entries of the kernel's TCP socket
	// table and of its UDP flow table (each); 0 means
	// DefaultMaxConnections. A socket or flow that finds its table full is
	// counted in Snapshot's MapFull and not tracked.
	MaxConnections int
}

// ValidMaxConnections reports why n cannot be a table size, or nil.
func ValidMaxConnections(n int) error {
	if n < MinMaxConnections || n > MaxMaxConnections {
		return fmt.Errorf("must be between %d and %d", MinMaxConnections, MaxMaxConnections)
	}
	return nil
}

// ringBytes is the closed-event ring buffer size for a table of n entries:
// room for every tracked socket to close between two reads, rounded up to a
// power of two (the kernel requires a power-of-two number of pages).
func ringBytes(n int) uint32 {
	want := uint64(n) * closedRecordSize
	size := uint64(minRingBytes)
	for size < want && size < maxRingBytes {
		size <<= 1
	}
	return uint32(size)
}

// sizeMaps sets the table and ring buffer sizes of spec for n connections.
func sizeMaps(spec *ebpf.CollectionSpec, n int) error {
	if err := ValidMaxConnections(n); err != nil {
		return fmt.Errorf("max connections %d: %w", n, err)
	}
	// owners (UDP socket owners, an LRU that evicts gracefully and is
	// preallocated) keeps its compiled size.
	for _, name := range []string{"conns", "flows"} {
		m, ok := spec.Maps[name]
		if !ok {
			return fmt.Errorf("map %s missing from the BPF object", name)
		}
		m.MaxEntries = uint32(n)
	}
	ring, ok := spec.Maps["closed"]
	if !ok {
		return fmt.Errorf("map closed missing from the BPF object")
	}
	ring.MaxEntries = ringBytes(n)
	return nil
}

// Tracker owns the loaded programs and the state needed between snapshots.
// Its methods are safe for concurrent use.
type Tracker struct {
	cfg      Config
	spec     *ebpf.CollectionSpec
	objs     connsMaps
	maps     map[string]*ebpf.Map
	attached []attachment
	programs uint32 // distinct tracing programs attached (busy masks used)
	choices  []features.Choice
	events   *ringbuf.Reader
	cgroups  *cgroup.Resolver

	mu          sync.Mutex
	preexisting map[uint64]*preexisting // by socket cookie, until they close
	previous    map[key]totals          // what the last snapshot reported
	last        time.Time
}

// key identifies a connection across snapshots: a TCP socket by its cookie
// alone, a UDP flow by its full key.
type key = connsFlowKey

type totals struct{ in, out uint64 }

// Open loads and attaches the connection hooks and lists the connections
// that already exist. Close it to detach.
func Open(cfg Config) (*Tracker, error) {
	if cfg.Backend == "" {
		cfg.Backend = features.Auto
	}
	if cfg.UDPIdle == 0 {
		cfg.UDPIdle = DefaultUDPIdle
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	t := &Tracker{cfg: cfg, previous: map[key]totals{}}
	if err := t.open(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Probe attaches every connection hook, detaches them again and reports the
// backend each got or why none would attach (for doctor).
func Probe(backend features.Backend) ([]features.Choice, error) {
	t := &Tracker{cfg: Config{MaxConnections: DefaultMaxConnections}}
	defer t.Close()
	if err := t.loadMaps(); err != nil {
		return nil, err
	}
	err := t.attachHooks(backend)
	return t.choices, err
}

// loadMaps creates the maps every program of the object shares.
func (t *Tracker) loadMaps() error {
	if err := features.RemoveMemlock(); err != nil {
		return err
	}
	var err error
	if t.spec, err = loadConns(); err != nil {
		return err
	}
	if err := sizeMaps(t.spec, t.cfg.MaxConnections); err != nil {
		return err
	}
	if err := t.spec.Variables["tracing_cookie"].Set(tracingCookie()); err != nil {
		return fmt.Errorf("tracing_cookie: %w", err)
	}
	if err := t.spec.LoadAndAssign(&t.objs, nil); err != nil {
		return fmt.Errorf("creating connection maps: %w", err)
	}
	t.maps = map[string]*ebpf.Map{
		"conns": t.objs.Conns, "flows": t.objs.Flows, "owners": t.objs.Owners,
		"listeners": t.objs.Listeners, "closed": t.objs.Closed, "drops": t.objs.Drops,
		"busy": t.objs.Busy,
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
	if t.events, err = ringbuf.NewReader(t.objs.Closed); err != nil {
		return fmt.Errorf("ring buffer: %w", err)
	}
	if err := t.attachHooks(t.cfg.Backend); err != nil {
		return err
	}
	// Listed after attaching, so that no connection falls between the two:
	// one that closes in between is reported by the kernel.
	t.preexisting = listPreexisting()
	if err := t.seedListeners(); err != nil {
		return err
	}
	t.last = time.Now()
	return nil
}

// Choices reports the backend chosen for each hook and why others were refused.
func (t *Tracker) Choices() []features.Choice { return t.choices }

// Close detaches every program and frees the maps.
func (t *Tracker) Close() error {
	var errs []error
	for _, a := range t.attached {
		errs = append(errs, a.close())
	}
	if t.events != nil {
		errs = append(errs, t.events.Close())
	}
	errs = append(errs, t.objs.Close())
	return errors.Join(errs...)
}

// Snapshot returns every live connection (event new on its first
// appearance, update afterwards), every connection that closed since the
// previous call (event closed, final totals, reported once), rates over the
// time since the previous call, and the cumulative loss counters.
func (t *Tracker) Snapshot() (conn.Snapshot, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	elapsed := now.Sub(t.last).Seconds()
	t.last = now
	current := map[key]totals{}
	snap := conn.Snapshot{Time: now}
	emit := func(k key, r conn.Record, closed bool) {
		prev, seen := t.previous[k]
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
		if !closed {
			current[k] = totals{r.BytesIn, r.BytesOut}
		}
		if t.cfg.Filter.Match(&r) {
			snap.Records = append(snap.Records, r)
		}
	}

	// Live entries first, then the closed events: a connection that closes
	// in between is then reported closed, not lost for one refresh.
	live := map[uint64]conn.Record{}
	cookies, conns, err := readAll[uint64, connsConn](t.objs.Conns)
	if err != nil {
		return snap, fmt.Errorf("reading connections: %w", err)
	}
	for i, cookie := range cookies {
		live[cookie] = t.tcpRecord(&conns[i])
	}
	closed, err := t.drainClosed()
	if err != nil {
		return snap, err
	}
	for _, c := range closed {
		r := t.tcpRecord(&c)
		delete(live, c.Cookie)
		delete(t.preexisting, c.Cookie)
		emit(key{Cookie: c.Cookie}, r, true)
	}
	for cookie, r := range live {
		emit(key{Cookie: cookie}, r, false)
	}
	for cookie, p := range t.preexisting {
		if _, ok := live[cookie]; !ok {
			emit(key{Cookie: cookie}, p.rec, false)
		}
	}
	if err := t.udpFlows(emit); err != nil {
		return snap, err
	}
	t.previous = current
	slices.SortFunc(snap.Records, byTuple)
	snap.Lost, snap.MapFull, err = t.drops()
	return snap, err
}

// drainClosed reads every closed-connection event queued so far.
func (t *Tracker) drainClosed() ([]connsConn, error) {
	var out []connsConn
	t.events.SetDeadline(time.Now())
	var rec ringbuf.Record
	for {
		err := t.events.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("reading closed connections: %w", err)
		}
		var c connsConn
		if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &c); err != nil {
			return out, fmt.Errorf("decoding closed connection: %w", err)
		}
		out = append(out, c)
	}
}

// udpFlows reports every UDP flow; flows idle longer than UDPIdle are
// reported closed and removed from the kernel's map.
func (t *Tracker) udpFlows(emit func(key, conn.Record, bool)) error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil { // bpf_ktime_get_ns's clock
		return err
	}
	nowNS := uint64(ts.Nano())
	keys, flows, err := readAll[connsFlowKey, connsFlow](t.objs.Flows)
	if err != nil {
		return fmt.Errorf("reading UDP flows: %w", err)
	}
	var expired []connsFlowKey
	for i, k := range keys {
		f := &flows[i]
		idle := nowNS > f.LastNs && time.Duration(nowNS-f.LastNs) > t.cfg.UDPIdle
		if idle {
			expired = append(expired, k)
		}
		emit(k, t.udpRecord(&k, f), idle)
	}
	for _, k := range expired {
		if err := t.objs.Flows.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("expiring UDP flow: %w", err)
		}
	}
	return nil
}

// readAll reads every entry of a hash map with batch lookups. They walk the
// map bucket by bucket and, unlike key-by-key iteration, neither restart nor
// abort when entries are deleted meanwhile — and connections close all the
// time.
func readAll[K, V any](m *ebpf.Map) ([]K, []V, error) {
	const chunk = 4096 // far more than one hash bucket ever holds
	var keys []K
	var values []V
	var cursor ebpf.MapBatchCursor
	k, v := make([]K, chunk), make([]V, chunk)
	for {
		n, err := m.BatchLookup(&cursor, k, v, nil)
		keys, values = append(keys, k[:n]...), append(values, v[:n]...)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return keys, values, nil
		}
		if err != nil {
			return nil, nil, err
		}
	}
}

// drops reads the loss counters. Lost counts closed-connection events the
// ring buffer had no room for, and events no copy of a tracing program
// handled: copy 0's runs that the kernel skipped because it was already
// running on that CPU (5.12+ counts them) or that it deferred while nested,
// less those another copy covered. Each is an event whose bytes,
// owner or close the tracker never saw.
func (t *Tracker) drops() (lost, mapFull uint64, err error) {
	var sums [dropCounters]uint64
	for idx := range sums {
		var perCPU []uint64
		if err := t.objs.Drops.Lookup(uint32(idx), &perCPU); err != nil {
			return 0, 0, fmt.Errorf("reading drop counters: %w", err)
		}
		for _, v := range perCPU {
			sums[idx] += v
		}
	}
	var skipped uint64
	for _, a := range t.attached {
		if a.copy > 0 {
			continue
		}
		s, err := a.prog.Stats()
		if err != nil {
			return 0, 0, fmt.Errorf("reading program statistics: %w", err)
		}
		skipped += s.RecursionMisses
	}
	uncovered := skipped + sums[dropDeferred]
	// Covered runs are a subset of the skipped and deferred ones; the guard
	// keeps a kernel that skips runs without counting them from wrapping.
	uncovered -= min(uncovered, sums[dropCovered])
	return sums[dropLost] + uncovered, sums[dropMapFull], nil
}

// byTuple orders records the same way every refresh: by protocol, then
// local and remote address and port.
func byTuple(a, b conn.Record) int {
	return cmp.Or(
		cmp.Compare(a.Proto, b.Proto),
		a.LocalAddr.Compare(b.LocalAddr), cmp.Compare(a.LocalPort, b.LocalPort),
		a.RemoteAddr.Compare(b.RemoteAddr), cmp.Compare(a.RemotePort, b.RemotePort),
		cmp.Compare(a.Netns, b.Netns))
}
