// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	ebpffeatures "github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/stacktop/stacktop/internal/attach"
	"github.com/stacktop/stacktop/internal/features"
)

// hooks is every attachment point the tracker needs. Every hook has an
// implementation that exists wherever either latency backend works
// (tracepoints, iterators and cgroup programs, 5.10+); the UDP hooks prefer
// fentry/fexit programs, which run for UDP only, where the kernel allows
// them (forced says what --backend changes). A hook's name says its
// protocol: --tcp attaches nothing for UDP (whose cgroup_skb programs would
// see every packet), --udp nothing for TCP. An optional hook's absence
// leaves the tracker working, knowing less.
var hooks = []attach.Hook{
	// Accepted sockets learn their owner from the process holding them,
	// found by an iterator over open files at the refresh that first shows
	// them (Tracker.ownAccepted), rather than at accept()'s exit: a program
	// on a syscall tracepoint slows every syscall on the host
	// (docs/CONNECTIONS.md). Optional (bpf_sock_from_file is 5.11+):
	// without it an accepted socket has its listener's owner until the
	// process that closes it.
	{Name: "tcp-accept", Optional: true, Backends: []attach.Backend{{Backend: iteratorPath,
		Programs: []attach.Program{{Name: ownersProgram, Kind: attach.Iterator}}}}},
	// The spare applies the state changes whose conns_tcp_state run the
	// kernel skipped (see bpf/conns.bpf.c); it must be attached second.
	{Name: "tcp-state", Backends: []attach.Backend{{Backend: features.Tracepoint, Programs: []attach.Program{
		{Name: connsProgConnsTcpState, Kind: attach.Tracing},
		{Name: connsProgConnsTcpStateSpare, Kind: attach.Tracing}}}}},
	// A closed socket is reported when it is destroyed: until then its
	// application may still read what is queued. The same pairing.
	{Name: "tcp-destroy", Backends: []attach.Backend{{Backend: features.Tracepoint, Programs: []attach.Program{
		{Name: connsProgConnsTcpDestroy, Kind: attach.Tracing},
		{Name: connsProgConnsTcpDestroySpare, Kind: attach.Tracing}}}}},
	// The refresh of every tracked socket's counters. Preferred: a
	// program stacktop runs over its table's entries, which reaches each
	// socket through the address its entry keeps (bpf/tcp.h): its cost
	// follows the tracked sockets, in one pass whatever the number of
	// network namespaces (bpf_for_each_map_elem: 5.13+). Else an iterator
	// over the TCP sockets of one namespace, read in each namespace with
	// tracked sockets, which walks the whole established table every time
	// (not from 5.15 to 6.10: see iteratorHazard). Optional: without
	// either, counters are read at state changes only.
	{Name: "tcp-counters", Optional: true, Backends: []attach.Backend{
		{Backend: runPath, Gate: refreshRuns, Programs: []attach.Program{{Name: refreshProgram, Kind: attach.Run}}},
		{Backend: iteratorPath, Gate: refreshIterates,
			Programs: []attach.Program{{Name: refreshNetnsProgram, Kind: attach.Iterator}}}}},
	// The iterator over a namespace's TCP sockets, at start-up. Optional:
	// not used from 5.15 to 6.10 (iteratorHazard).
	{Name: "tcp-adopt", Optional: true, Backends: []attach.Backend{{Backend: iteratorPath, Gate: iteratorHazard,
		Programs: []attach.Program{{Name: adoptProgram, Kind: attach.Iterator}}}}},
	// cgroup programs go on the root of the cgroup v2 hierarchy, which
	// every socket on the host belongs to (directly or below).
	{Name: "udp-owner", Backends: []attach.Backend{{Backend: cgroupPath, Programs: []attach.Program{
		{Name: connsProgConnsUdpOwner, Kind: attach.Cgroup, Cgroup: ebpf.AttachCGroupInetSockCreate}}}}},
	// UDP is counted per datagram. The cgroup_skb programs see every
	// packet of every socket, TCP's included (a few instructions each, but
	// a program run per packet); the fentry/fexit ones run for UDP only.
	{Name: "udp-ingress", Backends: []attach.Backend{
		{Backend: features.FentryBE, Programs: []attach.Program{{Name: connsProgConnsUdpEnqueue, Kind: attach.Tracing}}},
		{Backend: cgroupPath, Programs: []attach.Program{
			{Name: connsProgConnsUdpIngress, Kind: attach.Cgroup, Cgroup: ebpf.AttachCGroupInetIngress}}}}},
	{Name: "udp-egress", Backends: []attach.Backend{
		{Backend: features.FentryBE, Programs: []attach.Program{
			{Name: connsProgConnsUdpSend, Kind: attach.Tracing}, {Name: connsProgConnsUdp6Send, Kind: attach.Tracing}}},
		{Backend: cgroupPath, Programs: []attach.Program{
			{Name: connsProgConnsUdpEgress, Kind: attach.Cgroup, Cgroup: ebpf.AttachCGroupInetEgress}}}}},
	// A datagram the socket refuses moves from bytes_in to drops_in: at
	// __udp_enqueue_schedule_skb()'s exit, or at the tracepoint, which
	// has the dropped skb (the flow) since 6.10. Without either, drops
	// stay in bytes_in and drops_in is 0.
	{Name: "udp-drops", Optional: true, Backends: []attach.Backend{
		{Backend: features.FentryBE, Programs: []attach.Program{{Name: connsProgConnsUdpEnqueueExit, Kind: attach.Tracing}}},
		{Backend: features.Tracepoint, Gate: attach.TracepointArgs("udp_fail_queue_rcv_skb", 3, "6.10"),
			Programs: []attach.Program{{Name: connsProgConnsUdpDrop, Kind: attach.Tracing}}}}},
}

// The programs user space runs: conns_refresh over the table's entries
// once per refresh (or conns_refresh_netns over a network namespace's TCP
// sockets, in every namespace with tracked sockets), conns_adopt in every
// namespace at start-up, and conns_owners over every task's open files when
// accepted sockets wait for their owner.
const (
	refreshProgram      = connsProgConnsRefresh
	refreshNetnsProgram = connsProgConnsRefreshNetns
	adoptProgram        = connsProgConnsAdopt
	ownersProgram       = connsProgConnsOwners
)

// forced is h with the backends --backend leaves: fentry takes only fentry
// programs where h has them, tracepoint none; a hook with one
// implementation (tracepoints, iterators, cgroup programs) keeps it
// whatever is forced.
func forced(h *attach.Hook, b features.Backend) *attach.Hook {
	keep := func(attach.Backend) bool { return true }
	switch b {
	case features.FentryBE:
		if h.Programs(features.FentryBE) != nil {
			keep = func(be attach.Backend) bool { return be.Backend == features.FentryBE }
		}
	case features.Tracepoint:
		keep = func(be attach.Backend) bool { return be.Backend != features.FentryBE }
	}
	out := *h
	out.Backends = nil
	for _, be := range h.Backends {
		if keep(be) {
			out.Backends = append(out.Backends, be)
		}
	}
	return &out
}

// What the doctor table and the backend metric show for the shared hooks
// that are neither tracepoints nor fentry; --backend cannot choose them.
const (
	runPath      features.Backend = "run" // a program stacktop runs itself (a BPF test run)
	iteratorPath features.Backend = "iterator"
	cgroupPath   features.Backend = "cgroup"
)

// spares are the programs that run second on a tracepoint to apply what
// the first one's skipped runs missed. Their own skipped runs lose nothing
// unless the first program's run was skipped too, which the first
// program's count of skipped runs less the spares' applied ones tells.
var spares = map[string]bool{connsProgConnsTcpStateSpare: true, connsProgConnsTcpDestroySpare: true}

// refreshRuns says why conns_refresh cannot run on this kernel, or nil: it
// walks its batch with bpf_for_each_map_elem (5.13+), and copies each
// socket (socketFits).
var refreshRuns = sync.OnceValue(func() error {
	if err := ebpffeatures.HaveProgramHelper(ebpf.RawTracepoint, asm.FnForEachMapElem); err != nil {
		return fmt.Errorf("no bpf_for_each_map_elem (5.13+) for raw tracepoint programs: %w", err)
	}
	return socketFits()
})

// refreshIterates says why conns_refresh_netns, the refresh where
// conns_refresh is refused, cannot run on this kernel, or nil: it is a TCP
// iterator (iteratorHazard), and copies each socket as conns_refresh does
// (socketFits).
func refreshIterates() error {
	if err := iteratorHazard(); err != nil {
		return err
	}
	return socketFits()
}

// socketFits says why the refresh cannot copy this kernel's sockets, or
// nil: it copies each one into its scratch (the socket_copy map's value),
// which must hold this kernel's struct tcp_sock (lock debugging makes it
// larger).
var socketFits = sync.OnceValue(func() error {
	obj, err := loadConns()
	if err != nil {
		return err
	}
	kernel, err := attach.KernelTypes()
	if err != nil {
		return err
	}
	var tp *btf.Struct
	if err := kernel.TypeByName("tcp_sock", &tp); err != nil {
		return err
	}
	if room := obj.Maps[connsMapSocketCopy].ValueSize; tp.Size > room {
		return fmt.Errorf("this kernel's struct tcp_sock has %d bytes, more than the %d the refresh copies", tp.Size, room)
	}
	return nil
})

// iteratorHazard says why the TCP iterators are not used on this kernel,
// or nil. From 5.15 the iterator batches: it takes a reference (sock_hold)
// on every socket of a hash bucket while it holds the bucket's lock, and
// before 6.11 a socket entering TIME_WAIT is put into the bucket with a
// refcount of 0 that inet_twsk_hashdance() sets only after it has released
// the lock: the iterator's reference is then lost, and the socket freed
// while still in use. On 6.1 (Debian 6.1.176), under the churn of 3,000
// connections, the kernel warned "refcount_t: addition on 0;
// use-after-free" from bpf_iter_tcp_batch, then "underflow", then crashed
// on a freed socket in recvmsg. 6.11's inet_twsk_hashdance_schedule() sets
// the refcount before it unlocks; its name in the kernel's BTF tells the
// kernels apart. Before 5.15 (no struct bpf_tcp_iter_state) the iterator
// runs the program on each socket under the bucket's lock and takes no
// reference, so the race cannot happen there. (Soft lockups of 5.10 guests
// under churn, once blamed on the iterators, were QEMU 7.2's TCG looping on
// a stray int3 at a static key, with or without the iterators:
// docs/MATRIX.md.)
var iteratorHazard = sync.OnceValue(func() error {
	spec, err := attach.KernelTypes()
	if err != nil {
		return err
	}
	if _, err := spec.AnyTypeByName("bpf_tcp_iter_state"); err != nil {
		return nil // the iterator before batching
	}
	if _, err := spec.AnyTypeByName("inet_twsk_hashdance_schedule"); err != nil {
		return errors.New("not used from 5.15 to 6.10: there the TCP iterator can take a reference on a socket entering " +
			"TIME_WAIT before the kernel set its refcount, a use-after-free under connection churn")
	}
	return nil
})

// readIterator opens an iterator in the calling thread's network namespace
// (the one the iterator walks, for iter/tcp) and reads it to its end.
func readIterator(it *link.Iter) error {
	rd, err := it.Open()
	if err != nil {
		return fmt.Errorf("opening iterator: %w", err)
	}
	defer rd.Close()
	if _, err := io.Copy(io.Discard, rd); err != nil {
		return fmt.Errorf("reading iterator: %w", err)
	}
	return nil
}

// attachHooks picks a backend for every hook and keeps what it attached. It
// tries every hook even after one failed, so that the choices tell the
// whole story.
func (t *Tracker) attachHooks() error {
	var failed []error
	tcp, udp := t.cfg.Filter.Protocols()
	for i := range hooks {
		h := &hooks[i]
		if !tcp && strings.HasPrefix(h.Name, "tcp-") || !udp && strings.HasPrefix(h.Name, "udp-") {
			continue
		}
		if _, err := t.engine.Attach(forced(h, t.cfg.Backend), features.Auto); err != nil && !h.Optional {
			failed = append(failed, err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	more := ""
	if len(failed) > 1 {
		more = fmt.Sprintf(" (and %d more hooks)", len(failed)-1)
	}
	return fmt.Errorf("connection tracking: %w%s; `stacktop doctor` shows what this kernel allows",
		failed[0], more)
}

// tracingCookie reports whether tracing programs may call
// bpf_get_socket_cookie (5.12+).
var tracingCookie = features.SocketCookieTracing
