// SPDX-License-Identifier: Apache-2.0

package attach

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// Point is an attachment point a user names (latency --at): a raw
// tracepoint, "tracepoint:CATEGORY:NAME", or a kernel function,
// "fentry:FUNCTION". A tracing program attached there reads the point's
// arguments (PointArgs) from its context.
type Point struct {
	Kind     PointKind
	Category string // a tracepoint's category (its directory under tracefs events/)
	Name     string // the tracepoint's or the function's name
}

// PointKind is what a Point names.
type PointKind uint8

// The kinds of points.
const (
	TracepointPoint PointKind = iota + 1 // a raw tracepoint, attached as tp_btf
	FunctionPoint                        // a kernel function, attached as fentry
)

// The prefixes of a point's spec.
const (
	tracepointPrefix = "tracepoint:"
	fentryPrefix     = "fentry:"
)

// maxNameLen is the kernel's KSYM_NAME_LEN less its NUL: no longer name is a
// symbol.
const maxNameLen = 511

// ParsePoint reads a point's spec, tracepoint:CATEGORY:NAME or
// fentry:FUNCTION; it checks the syntax only (PointArgs asks the kernel).
func ParsePoint(spec string) (Point, error) {
	var p Point
	switch {
	case strings.HasPrefix(spec, tracepointPrefix):
		cat, name, ok := strings.Cut(spec[len(tracepointPrefix):], ":")
		if !ok {
			return p, BadPoint("a tracepoint is tracepoint:CATEGORY:NAME, e.g. tracepoint:net:netif_receive_skb")
		}
		// Categories may start with a digit (9p); names are C identifiers.
		if err := checkName("category", cat, true); err != nil {
			return p, err
		}
		if err := checkName("tracepoint name", name, false); err != nil {
			return p, err
		}
		return Point{Kind: TracepointPoint, Category: cat, Name: name}, nil
	case strings.HasPrefix(spec, fentryPrefix):
		name := spec[len(fentryPrefix):]
		if err := checkName("function name", name, false); err != nil {
			return p, err
		}
		return Point{Kind: FunctionPoint, Name: name}, nil
	}
	return p, BadPoint("must be tracepoint:CATEGORY:NAME or fentry:FUNCTION")
}

// checkName accepts a C identifier (leading digits too when digitFirst).
func checkName(what, s string, digitFirst bool) error {
	if s == "" {
		return BadPoint("the %s is empty", what)
	}
	if len(s) > maxNameLen {
		return BadPoint("the %s is longer than the kernel's %d bytes", what, maxNameLen)
	}
	for i, c := range s {
		letter := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		digit := c >= '0' && c <= '9'
		if !letter && (!digit || i == 0 && !digitFirst) {
			return BadPoint("the %s %q is not a C identifier (letters, digits, _)", what, s)
		}
	}
	return nil
}

// String is the point's spec, as ParsePoint reads it.
func (p Point) String() string {
	if p.Kind == TracepointPoint {
		return tracepointPrefix + p.Category + ":" + p.Name
	}
	return fentryPrefix + p.Name
}

// PointError says that a spec names no point of this kernel: malformed,
// or a point the kernel does not have (or not as named). The user's
// mistake, where other errors are failures to find out.
type PointError struct{ Reason string }

func (e *PointError) Error() string { return e.Reason }

// BadPoint returns a *PointError.
func BadPoint(format string, args ...any) error {
	return &PointError{Reason: fmt.Sprintf(format, args...)}
}

// PointArgs returns the arguments a tracing program attached at p reads
// (its context's ctx[0], ctx[1], …), from the kernel's BTF, then its
// modules': a function's parameters, or a tracepoint's (its btf_trace_
// typedef, without the context it passes first). The tracepoint's
// category is compared with tracefs where tracefs can be read. A
// *PointError says the kernel has no such point.
func PointArgs(p Point) ([]btf.FuncParam, error) {
	var proto *btf.FuncProto
	var err error
	if p.Kind == TracepointPoint {
		var td *btf.Typedef
		if td, err = kernelType[*btf.Typedef]("btf_trace_" + p.Name); err == nil {
			if ptr, ok := td.Type.(*btf.Pointer); ok {
				proto, _ = ptr.Target.(*btf.FuncProto)
			}
		}
	} else {
		var fn *btf.Func
		if fn, err = kernelType[*btf.Func](p.Name); err == nil {
			proto, _ = fn.Type.(*btf.FuncProto)
		}
	}
	switch {
	case errors.Is(err, btf.ErrNotFound) && p.Kind == TracepointPoint:
		return nil, BadPoint("this kernel has no tracepoint %s (no btf_trace_%[1]s in its BTF)", p.Name)
	case errors.Is(err, btf.ErrNotFound):
		return nil, BadPoint("this kernel has no function %s in its BTF", p.Name)
	case errors.Is(err, btf.ErrMultipleMatches):
		return nil, BadPoint("this kernel has several functions named %s (static ones of different files): fentry cannot tell them apart", p.Name)
	case err != nil:
		return nil, err
	case proto == nil || p.Kind == TracepointPoint && len(proto.Params) == 0:
		return nil, fmt.Errorf("%s in the kernel's BTF is not a function type", p)
	}
	if p.Kind == FunctionPoint {
		return proto.Params, nil
	}
	if err := checkCategory(p); err != nil {
		return nil, err
	}
	return proto.Params[1:], nil
}

// kernelType looks a type of kind T up by name in vmlinux, then in each
// module (in the order cilium/ebpf attaches: vmlinux first).
func kernelType[T btf.Type](name string) (T, error) {
	var typ T
	spec, err := KernelTypes()
	if err != nil {
		return typ, err
	}
	if err = spec.TypeByName(name, &typ); !errors.Is(err, btf.ErrNotFound) {
		return typ, err
	}
	modules, merr := kernelBTF.Modules()
	if merr != nil {
		return typ, err // no module BTF to search
	}
	for _, m := range modules {
		ms, merr := kernelBTF.Module(m)
		if merr != nil {
			continue // unloaded since, or without BTF
		}
		if merr := ms.TypeByName(name, &typ); !errors.Is(merr, btf.ErrNotFound) {
			return typ, merr
		}
	}
	return typ, err
}

// StructArg returns the index of the first argument that points to struct
// name (const, volatile and typedefs allowed), or -1.
func StructArg(args []btf.FuncParam, name string) int {
	for i, a := range args {
		ptr, ok := btf.UnderlyingType(a.Type).(*btf.Pointer)
		if !ok {
			continue
		}
		if s, ok := btf.UnderlyingType(ptr.Target).(*btf.Struct); ok && s.Name == name {
			return i
		}
	}
	return -1
}

// tracefsEvents are where tracefs lists the trace events, per category.
var tracefsEvents = []string{tracefs + "/events", "/sys/kernel/debug/tracing/events"}

// checkCategory compares a tracepoint's category with tracefs, which
// lists each trace event under its category (BTF knows tracepoints by name
// only), mounting it first where it is not (a freshly booted host, as
// root). It says nothing when tracefs cannot tell: not mountable or not
// readable by this process (only root may), or a bare tracepoint that has
// no trace event in any category.
func checkCategory(p Point) error {
	_ = mountTracefs() // a failure leaves tracefs unreadable, which is said below
	for _, dir := range tracefsEvents {
		if _, err := os.Stat(filepath.Join(dir, p.Category, p.Name)); err == nil {
			return nil
		}
		in, err := filepath.Glob(filepath.Join(dir, "*", p.Name))
		if err != nil || len(in) == 0 {
			if _, err := os.Stat(dir); err == nil {
				return nil // readable, and no event of that name: a bare tracepoint
			}
			continue
		}
		cats := make([]string, len(in))
		for i, path := range in {
			cats[i] = filepath.Base(filepath.Dir(path))
		}
		return BadPoint("tracepoint %s is in category %s, not %s", p.Name, strings.Join(cats, ", "), p.Category)
	}
	return nil
}
