// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/btf"

	"github.com/stacktop/stacktop/internal/attach"
	"github.com/stacktop/stacktop/internal/features"
)

// MaxAt bounds the --at probes of one run. Each is a program loaded and
// verified at start-up and run on every event at its point, and a series
// (per group) in every report and scrape: a handful of points along a
// packet's path is what one question needs.
const MaxAt = 8

// maxArgs is how many arguments a tracing program can read
// (MAX_BPF_FUNC_ARGS; AT_MAX_ARGS in bpf/at.h).
const maxArgs = 12

// At is a probe the user names (--at): a tracepoint or kernel function
// that takes a struct sk_buff *, where the latency of that skb is
// recorded as at the built-in probes. Its hook's name is the point's spec.
type At struct {
	Point   attach.Point
	SkbArg  int    // which of the point's arguments is the skb
	SkbName string // that parameter's name in the kernel's source
	// SockArg is which argument is a struct sock *, or -1: a socket names
	// the connection and namespace of the skb better than the skb does
	// once it is queued (UDP reuses skb->dev then).
	SockArg int
}

// atPrograms are the generic programs of --at probes, one per kind of
// point: the engine loads one copy per probe, at its point, with its
// constants (see atHook).
var atPrograms = map[attach.PointKind]attach.Program{
	attach.TracepointPoint: tracing(latencyProgTpAt, "tracepoint hit"),
	attach.FunctionPoint:   tracing(latencyProgFentryAt, "function call"),
}

// ParseAt checks a --at spec against the running kernel: the point exists
// and takes a struct sk_buff * (kernel BTF, which anyone may read), and a
// tracepoint is in the category named (tracefs, where this process can read
// it: root). Nothing is loaded. The error says why, without the spec.
func ParseAt(spec string) (At, error) {
	p, err := attach.ParsePoint(spec)
	if err != nil {
		return At{}, err
	}
	args, err := attach.PointArgs(p)
	if err != nil {
		return At{}, err
	}
	a := At{Point: p, SkbArg: attach.StructArg(args, "sk_buff"), SockArg: attach.StructArg(args, "sock")}
	if a.SkbArg < 0 {
		return At{}, attach.BadPoint("%s takes no struct sk_buff * (%s)", what(p), signature(args))
	}
	if a.SkbArg >= maxArgs {
		return At{}, attach.BadPoint("its skb is argument %d, beyond the %d a BPF program can read", a.SkbArg+1, maxArgs)
	}
	if a.SockArg >= maxArgs {
		a.SockArg = -1
	}
	a.SkbName = args[a.SkbArg].Name
	return a, nil
}

// what names a point in messages: "tracepoint net:netif_receive_skb".
func what(p attach.Point) string {
	if p.Kind == attach.TracepointPoint {
		return "tracepoint " + p.Category + ":" + p.Name
	}
	return "function " + p.Name
}

// signature lists arguments as C declares them: "struct sock *sk, int len".
func signature(args []btf.FuncParam) string {
	if len(args) == 0 {
		return "no arguments"
	}
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = cType(a.Type)
		if a.Name != "" && !strings.HasSuffix(s[i], "*") {
			s[i] += " "
		}
		s[i] += a.Name
	}
	return strings.Join(s, ", ")
}

// cType spells a BTF type as C would, far enough for a message.
func cType(t btf.Type) string {
	switch t := t.(type) {
	case *btf.Pointer:
		return cType(t.Target) + " *"
	case *btf.Const:
		return "const " + cType(t.Type)
	case *btf.Volatile:
		return "volatile " + cType(t.Type)
	case *btf.Struct:
		return "struct " + t.Name
	case *btf.Union:
		return "union " + t.Name
	case *btf.Enum:
		return "enum " + t.Name
	case *btf.FuncProto:
		return "function"
	case nil:
		return "void"
	}
	return t.TypeName()
}

// String is the probe's name: the point's spec.
func (a At) String() string { return a.Point.String() }

// Backend is the backend the probe's point needs: tp_btf programs are the
// tracepoint backend's, fentry programs the fentry backend's. --backend
// does not choose for an --at probe: its spec does.
func (a At) Backend() features.Backend {
	if a.Point.Kind == attach.FunctionPoint {
		return features.FentryBE
	}
	return features.Tracepoint
}

// Description says what a sample at the probe means.
func (a At) Description() string {
	name := ""
	if a.SkbName != "" {
		name = " (" + a.SkbName + ")"
	}
	return fmt.Sprintf("packet has reached %s, whose argument %d%s is the skb", what(a.Point), a.SkbArg+1, name)
}

// Programs lists the program that implements the probe on backend b (none
// but on its own backend).
func (a At) Programs(b features.Backend) []Program {
	if b != a.Backend() {
		return nil
	}
	p := atPrograms[a.Point.Kind]
	return []Program{{Name: p.Name, RunsPer: p.RunsPer}}
}

// hook is the probe's table entry as hook id: its kind's generic program
// at its point, with the constants that tell this copy its hook and
// arguments.
func (a At) hook(id Hook) attach.Hook {
	p := atPrograms[a.Point.Kind]
	p.Target = a.Point.Name
	p.Constants = map[string]any{
		latencyVarAtHook:    uint32(id),
		latencyVarAtSkbArg:  uint32(a.SkbArg),
		latencyVarAtSockArg: int32(a.SockArg),
	}
	return attach.Hook{Name: a.String(), Description: a.Description(),
		Backends: []attach.Backend{{Backend: a.Backend(), Programs: []attach.Program{p}}}}
}
