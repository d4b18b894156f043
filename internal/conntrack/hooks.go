package conntrack

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/features"
)

// hook is one attachment point the tracker needs, with the ways to
// implement it in preference order. Every hook has an implementation that
// exists wherever either latency backend works (tracepoints, iterators and
// cgroup programs, 5.10+); the UDP hooks prefer fentry/fexit programs, which
// run for UDP only, where the kernel allows them (forcedCandidates says what
// --backend changes).
type hook struct {
	name       string
	optional   bool // a kernel without it still tracks connections, knowing less
	candidates []candidate
}

// candidate is one way to implement a hook: attach loads its program(s)
// against the tracker's maps and attaches them, or leaves nothing behind.
type candidate struct {
	backend features.Backend
	attach  func(*Tracker) error
}

var hooks = []hook{
	// The spare applies the state changes whose conns_tcp_state run the
	// kernel skipped (see bpf/conns.bpf.c); it must be attached second.
	// Accepted sockets learn their owner from the process holding them,
	// found by an iterator over open files at the refresh that first shows
	// them (Tracker.ownAccepted), rather than at accept()'s exit: a program
	// on a syscall tracepoint slows every syscall on the host
	// (docs/CONNECTIONS.md). Optional (bpf_sock_from_file is 5.11+):
	// without it an accepted socket has its listener's owner until the
	// process that closes it.
	{"tcp-accept", true, []candidate{iterator(ownersProgram, nil)}},
	{"tcp-state", false, []candidate{tracing(connsProgConnsTcpState, connsProgConnsTcpStateSpare)}},
	// A closed socket is reported when it is destroyed: until then its
	// application may still read what is queued. The same pairing.
	{"tcp-destroy", false, []candidate{tracing(connsProgConnsTcpDestroy, connsProgConnsTcpDestroySpare)}},
	// Optional: not used before 6.11 (see iteratorHazard); counters are
	// then read at state changes only.
	{"tcp-counters", true, []candidate{iterator(refreshProgram, iteratorHazard)}},
	{"tcp-adopt", true, []candidate{iterator(adoptProgram, iteratorHazard)}},
	{"udp-owner", false, []candidate{cgroupProgram(connsProgConnsUdpOwner, ebpf.AttachCGroupInetSockCreate)}},
	// UDP is counted per datagram. The cgroup_skb programs see every
	// packet of every socket, TCP's included (a few instructions each, but
	// a program run per packet); the fentry/fexit ones run for UDP only.
	{"udp-ingress", false, []candidate{
		fentry(connsProgConnsUdpEnqueue),
		cgroupProgram(connsProgConnsUdpIngress, ebpf.AttachCGroupInetIngress)}},
	{"udp-egress", false, []candidate{
		fentry(connsProgConnsUdpSend, connsProgConnsUdp6Send),
		cgroupProgram(connsProgConnsUdpEgress, ebpf.AttachCGroupInetEgress)}},
	// A datagram the socket refuses moves from bytes_in to drops_in: at
	// __udp_enqueue_schedule_skb()'s exit, or at the tracepoint, which
	// has the dropped skb (the flow) since 6.10. Without either, drops
	// stay in bytes_in and drops_in is 0.
	{"udp-drops", true, []candidate{
		fentry(connsProgConnsUdpEnqueueExit),
		needsArgs("udp_fail_queue_rcv_skb", 3, tracing(connsProgConnsUdpDrop))}},
}

// The iterators: user space runs conns_refresh over a network namespace's
// TCP sockets in every namespace with tracked sockets once per refresh,
// conns_adopt in every namespace at start-up, and conns_owners over every
// task's open files when accepted sockets wait for their owner.
const (
	refreshProgram = connsProgConnsRefresh
	adoptProgram   = connsProgConnsAdopt
	ownersProgram  = connsProgConnsOwners
)

// What the doctor table and the backend metric show for the shared hooks
// that are neither tracepoints nor fentry; --backend cannot choose them.
const (
	iteratorPath features.Backend = "iterator"
	cgroupPath   features.Backend = "cgroup"
)

// spare tells the programs that run second on a tracepoint to apply what
// the first one's skipped runs missed. Their own skipped runs lose nothing
// unless the first program's run was skipped too, which the first
// program's count of skipped runs less the spares' applied ones tells.
func spare(program string) bool { return strings.HasSuffix(program, "_spare") }

// tracing is one or more tp_btf programs of the tracepoint backend, attached
// in this order: a tracepoint calls its programs in the order they attached.
func tracing(programs ...string) candidate {
	return candidate{features.Tracepoint, func(t *Tracker) error {
		for _, program := range programs {
			err := t.attach(program, "", func(p *ebpf.Program) (link.Link, error) {
				return link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
			})
			if err != nil {
				return err
			}
		}
		return nil
	}}
}

// fentry is one or more fentry/fexit programs, attached in this order.
func fentry(programs ...string) candidate {
	return candidate{features.FentryBE, func(t *Tracker) error {
		for _, program := range programs {
			err := t.attach(program, "", func(p *ebpf.Program) (link.Link, error) {
				return link.AttachTracing(link.TracingOptions{Program: p})
			})
			if err != nil {
				return err
			}
		}
		return nil
	}}
}

// forcedCandidates are the candidates of h that --backend leaves: fentry
// takes only fentry programs where h has them, tracepoint none; a hook with
// one implementation (tracepoints, iterators, cgroup programs) keeps it
// whatever is forced.
func (h hook) forcedCandidates(forced features.Backend) []candidate {
	keep := func(c candidate) bool { return true }
	switch forced {
	case features.FentryBE:
		if slices.ContainsFunc(h.candidates, func(c candidate) bool { return c.backend == features.FentryBE }) {
			keep = func(c candidate) bool { return c.backend == features.FentryBE }
		}
	case features.Tracepoint:
		keep = func(c candidate) bool { return c.backend != features.FentryBE }
	}
	var out []candidate
	for _, c := range h.candidates {
		if keep(c) {
			out = append(out, c)
		}
	}
	return out
}

// needsArgs is c where tracepoint tp has at least n arguments.
func needsArgs(tp string, n int, c candidate) candidate {
	attach := c.attach
	c.attach = func(t *Tracker) error {
		have, err := tracepointArgs(tp)
		if err != nil {
			return err
		}
		if have < n {
			return fmt.Errorf("tracepoint %s has %d arguments here, %d since 6.10", tp, have, n)
		}
		return attach(t)
	}
	return c
}

// tracepointArgs is the number of arguments of a raw tracepoint, from the
// kernel's BTF (btf_trace_<name>: a pointer to a function whose first
// parameter is the context, not an argument).
func tracepointArgs(tp string) (int, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return 0, fmt.Errorf("kernel BTF: %w", err)
	}
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+tp, &td); err != nil {
		return 0, fmt.Errorf("tracepoint %s in kernel BTF: %w", tp, err)
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return 0, fmt.Errorf("btf_trace_%s is not a function pointer", tp)
	}
	proto, ok := ptr.Target.(*btf.FuncProto)
	if !ok || len(proto.Params) == 0 {
		return 0, fmt.Errorf("btf_trace_%s is not a function pointer", tp)
	}
	return len(proto.Params) - 1, nil
}

// cgroupProgram attaches to the root of the cgroup v2 hierarchy, which
// every socket on the host belongs to (directly or below).
func cgroupProgram(program string, at ebpf.AttachType) candidate {
	return candidate{cgroupPath, func(t *Tracker) error {
		return t.attach(program, "", func(p *ebpf.Program) (link.Link, error) {
			root, err := cgroup.Root()
			if err != nil {
				return nil, err
			}
			return link.AttachCgroup(link.CgroupOptions{Path: root, Attach: at, Program: p})
		})
	}}
}

// iterator makes a BPF iterator link, where hazard (if any) finds none;
// reading it (readIterator) runs the program.
func iterator(program string, hazard func() error) candidate {
	return candidate{iteratorPath, func(t *Tracker) error {
		if hazard != nil {
			if err := hazard(); err != nil {
				return err
			}
		}
		return t.attach(program, "", func(p *ebpf.Program) (link.Link, error) {
			return link.AttachIter(link.IterOptions{Program: p})
		})
	}}
}

// beforeBatching says why a hook is not used on kernels older than 5.15, or
// nil. On the 5.10 guest a tracker opened while 200 connections a second
// came and went locked up both CPUs (soft lockups, RCU stalls) in three of
// nine runs of TestStartupUnderChurn, with the TCP iterators and without
// them; without the accept tracepoints as well, three of three ran, as on
// 6.1, 6.12, 7.2 and the host. The cause is not known; the TCP iterator
// before 5.15 also walked the tables under their bucket locks without the
// socket lock. struct bpf_tcp_iter_state (5.15, the batching iterator)
// tells the kernels apart; 5.11-5.14 are untested.
var beforeBatching = sync.OnceValue(func() error {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return fmt.Errorf("kernel BTF: %w", err)
	}
	if _, err := spec.AnyTypeByName("bpf_tcp_iter_state"); err != nil {
		return errors.New("not used before 5.15: with it the 5.10 kernel locked up under connection churn")
	}
	return nil
})

// iteratorHazard says why the TCP iterators are not used on this kernel,
// or nil. Before 5.15, see beforeBatching. From 5.15 the iterator takes a
// reference (sock_hold) on every socket of a hash bucket while it holds the
// bucket's lock, and before 6.11 a socket entering TIME_WAIT is put into
// the bucket with a refcount of 0 that inet_twsk_hashdance() sets only after
// it has released the lock: the iterator's reference is then lost, and the
// socket freed while still in use. On 6.1 (Debian 6.1.176), under the
// churn of 3,000 connections, the kernel warned "refcount_t: addition on 0;
// use-after-free" from bpf_iter_tcp_batch, then "underflow", then crashed
// on a freed socket in recvmsg. 6.11's inet_twsk_hashdance_schedule() sets
// the refcount before it unlocks; its name in the kernel's BTF tells the
// kernels apart.
var iteratorHazard = sync.OnceValue(func() error {
	if err := beforeBatching(); err != nil {
		return err
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return fmt.Errorf("kernel BTF: %w", err)
	}
	if _, err := spec.AnyTypeByName("inet_twsk_hashdance_schedule"); err != nil {
		return errors.New("not used before 6.11: there the TCP iterator can take a reference on a socket entering TIME_WAIT " +
			"before the kernel set its refcount, a use-after-free under connection churn")
	}
	return nil
})

// iterator returns an attached iterator's link, or nil when it is not
// attached (--udp tracks no TCP).
func (t *Tracker) iterator(program string) *link.Iter {
	for _, a := range t.attached {
		if it, ok := a.link.(*link.Iter); ok && a.name == program {
			return it
		}
	}
	return nil
}

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
	for _, h := range hooks {
		// Hook names say their protocol: --tcp attaches nothing for UDP
		// (whose cgroup_skb programs would see every packet), --udp
		// nothing for TCP.
		if !tcp && strings.HasPrefix(h.name, "tcp-") || !udp && strings.HasPrefix(h.name, "udp-") {
			continue
		}
		own := h.forcedCandidates(t.cfg.Backend)
		cands := make([]features.Candidate, len(own))
		for i, c := range own {
			cands[i] = features.Candidate{Backend: c.backend, Attach: func() error { return t.attachAll(c) }}
		}
		choice, err := features.Choose(h.name, features.Auto, cands...)
		t.choices = append(t.choices, choice)
		if err != nil && !h.optional {
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

// attachAll runs a candidate and, when it fails part way, detaches what it
// attached, so that a refused candidate leaves nothing behind.
func (t *Tracker) attachAll(c candidate) error {
	attached := len(t.attached)
	err := c.attach(t)
	if err == nil {
		return nil
	}
	for _, a := range t.attached[attached:] {
		err = errors.Join(err, a.close())
	}
	t.attached = t.attached[:attached]
	return err
}

// attach loads one program against the tracker's shared maps (for the
// kernel function attachTo, when not empty) and attaches it.
func (t *Tracker) attach(program, attachTo string, attach func(*ebpf.Program) (link.Link, error)) error {
	spec := t.spec.Copy()
	for name, p := range spec.Programs {
		if name != program {
			delete(spec.Programs, name)
		} else if attachTo != "" {
			p.AttachTo = attachTo
		}
	}
	what := program
	if attachTo != "" {
		what += " on " + attachTo
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: t.maps})
	if err != nil {
		return err // names the program
	}
	prog := coll.DetachProgram(program)
	coll.Close()
	l, err := attach(prog)
	if err != nil {
		prog.Close()
		return fmt.Errorf("attach %s: %w", what, err)
	}
	t.attached = append(t.attached, attachment{program, prog, l})
	return nil
}

// attachment is one attached program.
type attachment struct {
	name string
	prog *ebpf.Program
	link link.Link
}

func (a attachment) close() error {
	return errors.Join(a.link.Close(), a.prog.Close())
}

// tracingCookie reports whether tracing programs may call
// bpf_get_socket_cookie (5.12+).
var tracingCookie = features.SocketCookieTracing
