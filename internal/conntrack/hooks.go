package conntrack

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/features"
)

// hook is one attachment point the tracker needs, with the ways to
// implement it in preference order. A backend added later (fexit on
// tcp_sendmsg/tcp_recvmsg/udp_*) is one more candidate in this table and
// one more program in bpf/conns.bpf.c writing the same maps.
type hook struct {
	name       string
	candidates []candidate
}

type candidate struct {
	backend features.Backend
	program string // program name in bpf/conns.bpf.c
	attach  func(*ebpf.Program) (link.Link, error)
}

var hooks = []hook{
	{"tcp-state", []candidate{{features.Tracepoint, "conns_tcp_state", attachTracing}}},
	{"sock-send", []candidate{{features.Tracepoint, "conns_send", attachTracing}}},
	{"sock-recv", []candidate{{features.Tracepoint, "conns_recv", attachTracing}}},
	{"udp-ingress", []candidate{{features.Tracepoint, "conns_udp_ingress", attachCgroup(ebpf.AttachCGroupInetIngress)}}},
	{"udp-egress", []candidate{{features.Tracepoint, "conns_udp_egress", attachCgroup(ebpf.AttachCGroupInetEgress)}}},
}

func attachTracing(p *ebpf.Program) (link.Link, error) {
	return link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
}

// attachCgroup attaches to the root of the cgroup v2 hierarchy, which every
// socket on the host belongs to (directly or below).
func attachCgroup(at ebpf.AttachType) func(*ebpf.Program) (link.Link, error) {
	return func(p *ebpf.Program) (link.Link, error) {
		root, err := cgroup.Root()
		if err != nil {
			return nil, err
		}
		return link.AttachCgroup(link.CgroupOptions{Path: root, Attach: at, Program: p})
	}
}

// attachHooks picks a backend for every hook and keeps what it attached. It
// tries every hook even after one failed, so that the choices tell the
// whole story.
func (t *Tracker) attachHooks(forced features.Backend) error {
	var failed []error
	for _, h := range hooks {
		cands := make([]features.Candidate, len(h.candidates))
		for i, c := range h.candidates {
			cands[i] = features.Candidate{Backend: c.backend, Attach: func() error { return t.attach(c) }}
		}
		choice, err := features.Choose(h.name, forced, cands...)
		t.choices = append(t.choices, choice)
		if err != nil {
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
	return fmt.Errorf("connection tracking: %w%s; `stacktop doctor` shows what this kernel allows, --backend auto picks what works",
		failed[0], more)
}

// attach loads one program against the tracker's shared maps and attaches
// it, leaving nothing behind on failure.
func (t *Tracker) attach(c candidate) error {
	spec := t.spec.Copy()
	for name := range spec.Programs {
		if name != c.program {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: t.maps})
	if err != nil {
		return fmt.Errorf("load %s: %w", c.program, err)
	}
	prog := coll.DetachProgram(c.program)
	coll.Close()
	l, err := c.attach(prog)
	if err != nil {
		prog.Close()
		return fmt.Errorf("attach %s: %w", c.program, err)
	}
	t.progs = append(t.progs, prog)
	t.links = append(t.links, l)
	return nil
}
