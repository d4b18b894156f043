// SPDX-License-Identifier: Apache-2.0

// Package attach is stacktop's one attach engine. A loader describes its BPF
// object's hooks in a table — each Hook lists its Backends in preference
// order, each Backend its Programs in attach order and how each attaches —
// and an Engine does the rest: it creates the object's maps once, loads each
// program on its own against them (with one kernel BTF cache for the whole
// process), attaches a hook with the first backend that works, takes back
// what a refused backend had attached, and records every choice and refusal
// as a features.Choice, which is what doctor, latency -l and the
// stacktop_probe_backend_info metric show.
//
// Adding a hook is the C and one Hook entry in its loader's table; a
// user-defined probe is a Hook built at run time.
package attach

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/stacktop/stacktop/internal/features"
)

// Hook is one attachment point of a tool, with the ways to implement it.
type Hook struct {
	Name        string
	Description string // what a sample or event at this hook means
	// Optional: the tool works without it, knowing less. Engine.Attach
	// reports its refusal all the same; the caller decides.
	Optional bool
	Backends []Backend // in preference order
}

// Backend is one way to implement a hook: the programs, attached in this
// order (a tracepoint calls its programs in the order they attached), all
// or none.
type Backend struct {
	Backend features.Backend
	// Gate, when not nil, says why this backend must not be used on this
	// kernel (its error is recorded as the refusal), or nil.
	Gate     Gate
	Programs []Program
}

// Gate is a precondition of a backend: nil when it may be used.
type Gate func() error

// Kind is how a program attaches.
type Kind uint8

// The kinds of attachment.
const (
	// Tracing: fentry, fexit or tp_btf, at the kernel function or raw
	// tracepoint its section names, or Program.Target.
	Tracing Kind = iota + 1
	// Netfilter: a netfilter link for IPv4 and one for IPv6 in every
	// network namespace of the engine's scope (Options.Netns), at
	// Program.Netfilter's hook and priority or the nearest free one.
	Netfilter
	// Cgroup: the root of the cgroup v2 hierarchy, as Program.Cgroup.
	Cgroup
	// Iterator: a BPF iterator link, which the loader reads
	// (Engine.Iterator) to run the program.
	Iterator
	// Tracepoint: a classic tracepoint, Program.Target "category:name"
	// (mounting tracefs where it is not).
	Tracepoint
	// Run: attached nowhere; the loader runs it when it needs to
	// (Engine.Runnable, ebpf.Program.Run). Attaching it is loading it and
	// running it once with a context of one zero argument, which the
	// program must take as nothing to do: a kernel may refuse test runs.
	Run
)

func (k Kind) String() string {
	switch k {
	case Tracing:
		return "tracing"
	case Netfilter:
		return "netfilter"
	case Cgroup:
		return "cgroup"
	case Iterator:
		return "iterator"
	case Tracepoint:
		return "tracepoint"
	case Run:
		return "run"
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Program is one BPF program of the object and where it attaches. A
// program that serves several hooks appears in each of their entries, the
// same each time, and is attached once (once per Target).
type Program struct {
	Name string // in the object: the generated <obj>Prog… constant
	Kind Kind
	// Target is where a Tracing program attaches when not where its
	// section says (a user-defined probe: the kernel function or raw
	// tracepoint), and a Tracepoint program's "category:name".
	Target string
	// Constants are values of the object's read-only globals (volatile
	// const) for this program alone: it is loaded with a .rodata of its
	// own, on whose values the verifier prunes as on the shared one's. A
	// user-defined probe uses them to tell its copy of a generic program
	// which hook it records and which argument is its packet. A program
	// attaches once per Target and Constants.
	Constants map[string]any
	Netfilter NetfilterPoint  // Kind Netfilter
	Cgroup    ebpf.AttachType // Kind Cgroup
	// Optional: the hook keeps the programs attached before it when this
	// one fails (e.g. an IPv6 half on a kernel without IPv6); it does not
	// fail the backend.
	Optional bool
	RunsPer  string // the event it runs on, for -l and the docs
}

// NetfilterPoint is a netfilter hook and the priority to attach at.
type NetfilterPoint struct {
	Hook     link.NetfilterInetHook
	Priority int32
}

// Netfilter priorities: the kernel refuses exactly NF_IP_PRI_FIRST (INT_MIN)
// and NF_IP_PRI_LAST (INT_MAX), so first and last are one step inside.
const (
	NetfilterFirst = math.MinInt32 + 1
	NetfilterLast  = math.MaxInt32 - 1
)

// Programs lists the programs that implement h on backend b (none when b
// does not implement it).
func (h *Hook) Programs(b features.Backend) []Program {
	for _, be := range h.Backends {
		if be.Backend == b {
			return be.Programs
		}
	}
	return nil
}

// Uses reports whether backend b of h attaches a program of kind k.
func (h *Hook) Uses(b features.Backend, k Kind) bool {
	for _, p := range h.Programs(b) {
		if p.Kind == k {
			return true
		}
	}
	return false
}

// Check compares a table with the object it attaches: every program it
// names is in the object, a program named twice attaches the same way both
// times, Tracepoint programs name their "category:name", and every program
// of the object serves some hook.
func Check(spec *ebpf.CollectionSpec, hooks []Hook) error {
	var errs []error
	seen := map[string]Program{}
	for _, h := range hooks {
		for _, b := range h.Backends {
			for _, p := range b.Programs {
				if spec.Programs[p.Name] == nil {
					errs = append(errs, fmt.Errorf("hook %s: program %s is not in the object", h.Name, p.Name))
				}
				if prev, ok := seen[p.Name]; ok && !reflect.DeepEqual(prev, p) {
					errs = append(errs, fmt.Errorf("hook %s: program %s attaches as %+v here, as %+v elsewhere", h.Name, p.Name, p, prev))
				}
				if _, _, err := p.tracepoint(); p.Kind == Tracepoint && err != nil {
					errs = append(errs, fmt.Errorf("hook %s: %w", h.Name, err))
				}
				seen[p.Name] = p
			}
		}
	}
	for name := range spec.Programs {
		if _, ok := seen[name]; !ok {
			errs = append(errs, fmt.Errorf("program %s of the object serves no hook", name))
		}
	}
	return errors.Join(errs...)
}

// tracepoint splits a Tracepoint program's Target.
func (p *Program) tracepoint() (category, name string, err error) {
	category, name, ok := strings.Cut(p.Target, ":")
	if !ok || category == "" || name == "" {
		return "", "", fmt.Errorf("program %s: tracepoint %q is not category:name", p.Name, p.Target)
	}
	return category, name, nil
}
