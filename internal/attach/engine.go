// SPDX-License-Identifier: Apache-2.0

package attach

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"sync"

	"github.com/cilium/ebpf"
	cfeatures "github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/features"
)

// Engine holds one BPF object's maps, the programs it attached and the
// backend chosen for each hook. Its methods are safe for concurrent use.
type Engine struct {
	spec    *ebpf.CollectionSpec
	maps    map[string]*ebpf.Map
	missing map[string]error // maps of a type this kernel lacks, and why
	netns   Netns

	mu       sync.Mutex
	attached []*attachment // in attach order
	choices  []features.Choice
}

// attachment is a loaded program attached wherever its kind says.
type attachment struct {
	Program
	prog *ebpf.Program
	link link.Link       // every kind but Netfilter and Run
	nf   *netfilterLinks // Kind Netfilter
}

func (a *attachment) close() error {
	var err error
	switch {
	case a.nf != nil:
		err = a.nf.close()
	case a.link != nil:
		err = a.link.Close()
	}
	return errors.Join(err, a.prog.Close())
}

// Load creates every map of spec once: the programs attached later share
// them, so no program gets a map of its own. A map of a type the kernel
// lacks is left out with the reason; only the programs that use it cannot
// load. Set spec's constants and map sizes before. scope is where Netfilter
// programs attach.
func Load(spec *ebpf.CollectionSpec, scope Netns) (*Engine, error) {
	if err := features.RemoveMemlock(); err != nil {
		return nil, err
	}
	mapsOnly := spec.Copy()
	mapsOnly.Programs = nil
	missing := map[string]error{}
	for name, m := range mapsOnly.Maps {
		if err := cfeatures.HaveMapType(m.Type); errors.Is(err, ebpf.ErrNotSupported) {
			missing[name] = err
			delete(mapsOnly.Maps, name)
		}
	}
	coll, err := ebpf.NewCollection(mapsOnly)
	if err != nil {
		return nil, fmt.Errorf("creating BPF maps: %w", err)
	}
	return &Engine{spec: spec, maps: coll.Maps, missing: missing, netns: scope}, nil
}

// Only is a copy of spec reduced to the programs of hooks (of every
// backend), the maps they use and the global variables they read: an engine
// Loaded from it creates no other map. A tool's object sizes its maps for
// every CPU and the busiest host, which a program loaded for a moment, a
// start-up check, should not allocate.
func Only(spec *ebpf.CollectionSpec, hooks ...Hook) *ebpf.CollectionSpec {
	one := spec.Copy()
	programs := map[string]bool{}
	for _, h := range hooks {
		for _, b := range h.Backends {
			for _, p := range b.Programs {
				programs[p.Name] = true
			}
		}
	}
	maps.DeleteFunc(one.Programs, func(name string, _ *ebpf.ProgramSpec) bool { return !programs[name] })
	used := map[string]bool{}
	for _, p := range one.Programs {
		for _, ins := range p.Instructions {
			used[ins.Reference()] = true
		}
	}
	maps.DeleteFunc(one.Maps, func(name string, _ *ebpf.MapSpec) bool { return !used[name] })
	maps.DeleteFunc(one.Variables, func(_ string, v *ebpf.VariableSpec) bool { return !used[v.SectionName] })
	return one
}

// AssignMaps sets every *ebpf.Map field of the struct to (a pointer to)
// the map its `ebpf:"name"` tag names: to is a bpf2go <obj>Maps struct. A
// map this kernel lacks stays nil. The maps stay the engine's: Close the
// engine, not them.
func (e *Engine) AssignMaps(to any) error {
	v := reflect.ValueOf(to)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("assigning maps to %T: not a pointer to a struct", to)
	}
	v = v.Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name := f.Tag.Get("ebpf")
		if name == "" || f.Type != reflect.TypeFor[*ebpf.Map]() {
			continue
		}
		m, ok := e.maps[name]
		if _, lacking := e.missing[name]; !ok && !lacking {
			return fmt.Errorf("assigning maps to %T: the object has no map %s", to, name)
		}
		v.Field(i).Set(reflect.ValueOf(m))
	}
	return nil
}

// Attach attaches hook h with its first backend that works (only forced,
// unless forced is features.Auto) and records the choice with every
// refusal. Programs other hooks attached already are not attached again; a
// refused backend leaves nothing of its own behind.
func (e *Engine) Attach(h *Hook, forced features.Backend) (features.Choice, error) {
	cands := make([]features.Candidate, len(h.Backends))
	for i := range h.Backends {
		b := &h.Backends[i]
		cands[i] = features.Candidate{Backend: b.Backend, Attach: func() error { return e.attachBackend(h, b) }}
	}
	c, err := features.Choose(h.Name, forced, cands...)
	e.mu.Lock()
	e.choices = append(e.choices, c)
	e.mu.Unlock()
	return c, err
}

// Choices reports the backend chosen for each hook attached so far and why
// others were refused, in the order of the Attach calls.
func (e *Engine) Choices() []features.Choice {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]features.Choice(nil), e.choices...)
}

func (e *Engine) attachBackend(h *Hook, b *Backend) error {
	if b.Gate != nil {
		if err := b.Gate(); err != nil {
			return err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	before := len(e.attached)
	have := 0 // programs of b attached, by this call or before
	for _, p := range b.Programs {
		if e.find(p) != nil {
			have++
			continue
		}
		a, err := e.attach(p)
		if err != nil && p.Optional && have > 0 {
			slog.Warn("hook attached without one of its programs", "hook", h.Name, "program", p.Name, "err", err)
			continue
		}
		if err != nil {
			for _, a := range e.attached[before:] {
				err = errors.Join(err, a.close())
			}
			e.attached = e.attached[:before]
			return err
		}
		e.attached = append(e.attached, a)
		have++
	}
	return nil
}

// find returns the attachment of program p: a program retargeted at run
// time (Program.Target, Program.Constants) is attached once per target and
// constants.
func (e *Engine) find(p Program) *attachment {
	for _, a := range e.attached {
		if a.Name == p.Name && a.Target == p.Target && reflect.DeepEqual(a.Constants, p.Constants) {
			return a
		}
	}
	return nil
}

// attach loads p against the shared maps and attaches it.
func (e *Engine) attach(p Program) (*attachment, error) {
	what := p.Name
	if p.Target != "" {
		what += " on " + p.Target
	}
	prog, err := e.load(p)
	if err != nil {
		return nil, err
	}
	a := &attachment{Program: p, prog: prog}
	switch p.Kind {
	case Tracing:
		a.link, err = link.AttachTracing(link.TracingOptions{Program: prog, AttachType: e.spec.Programs[p.Name].AttachType})
	case Netfilter:
		a.nf, err = newNetfilterLinks(prog, p.Netfilter, &e.netns)
	case Cgroup:
		var root string
		if root, err = cgroup.Root(); err == nil {
			a.link, err = link.AttachCgroup(link.CgroupOptions{Path: root, Attach: p.Cgroup, Program: prog})
		}
	case Iterator:
		a.link, err = link.AttachIter(link.IterOptions{Program: prog})
	case Tracepoint:
		var category, name string
		if category, name, err = p.tracepoint(); err == nil {
			if err = mountTracefs(); err == nil {
				a.link, err = link.Tracepoint(category, name, prog, nil)
			}
		}
	case Run:
		_, err = prog.Run(&ebpf.RunOptions{Context: []uint64{0}})
	default:
		err = fmt.Errorf("unknown kind of attachment %v", p.Kind)
	}
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("attach %s: %w", what, err)
	}
	return a, nil
}

// load loads one program from a copy of the spec against the shared maps,
// so a program the kernel refuses (a backend it does not allow) does not
// take the others down.
func (e *Engine) load(p Program) (*ebpf.Program, error) {
	if e.spec.Programs[p.Name] == nil {
		return nil, fmt.Errorf("load %s: no such program in the object", p.Name)
	}
	one := e.spec.Copy()
	for name, ps := range one.Programs {
		if name != p.Name {
			delete(one.Programs, name)
		} else if p.Target != "" {
			ps.AttachTo = p.Target
		}
	}
	for _, ins := range one.Programs[p.Name].Instructions {
		if err, ok := e.missing[ins.Reference()]; ok {
			return nil, fmt.Errorf("load %s: map %s: %w", p.Name, ins.Reference(), err)
		}
	}
	for m := range e.missing {
		delete(one.Maps, m)
	}
	shared, err := e.constants(one, p)
	if err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: shared, Cache: kernelBTF})
	if err != nil {
		return nil, err // names the program
	}
	defer coll.Close()
	return coll.DetachProgram(p.Name), nil
}

// constants sets p's Constants in its copy of the spec, one, and returns
// the maps it shares: all of the engine's but the read-only sections that
// hold those constants, which p gets of its own.
func (e *Engine) constants(one *ebpf.CollectionSpec, p Program) (map[string]*ebpf.Map, error) {
	if len(p.Constants) == 0 {
		return e.maps, nil
	}
	shared := maps.Clone(e.maps)
	for name, value := range p.Constants {
		v := one.Variables[name]
		if v == nil || !v.Constant() {
			return nil, fmt.Errorf("load %s: the object has no constant %s", p.Name, name)
		}
		if err := v.Set(value); err != nil {
			return nil, fmt.Errorf("load %s: setting %s: %w", p.Name, name, err)
		}
		delete(shared, v.SectionName)
	}
	return shared, nil
}

// Attached is one attached program, for statistics and tests.
type Attached struct {
	Name    string
	Target  string // Program.Target
	Kind    Kind
	Program *ebpf.Program // the engine's: do not close it
	Netns   []uint64      // Kind Netfilter: the namespaces it has links in
}

// Attached lists the attached programs in attach order.
func (e *Engine) Attached() []Attached {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Attached, len(e.attached))
	for i, a := range e.attached {
		out[i] = Attached{Name: a.Name, Target: a.Target, Kind: a.Kind, Program: a.prog}
		if a.nf != nil {
			out[i].Netns = a.nf.namespaces()
		}
	}
	return out
}

// Iterator returns the link of the attached Iterator program with this
// name, or nil when it is not attached.
func (e *Engine) Iterator(name string) *link.Iter {
	e.mu.Lock()
	defer e.mu.Unlock()
	if a := e.find(Program{Name: name}); a != nil {
		it, _ := a.link.(*link.Iter)
		return it
	}
	return nil
}

// Runnable returns the attached Run program with this name, or nil when it
// is not attached.
func (e *Engine) Runnable(name string) *ebpf.Program {
	e.mu.Lock()
	defer e.mu.Unlock()
	if a := e.find(Program{Name: name}); a != nil && a.Kind == Run {
		return a.prog
	}
	return nil
}

// Resync attaches the Netfilter programs in the namespaces of a followed
// scope created since, and releases those that are gone.
func (e *Engine) Resync() {
	if !e.netns.Follow {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range e.attached {
		if a.nf != nil {
			_ = a.nf.sync(&e.netns, false)
		}
	}
}

// Close detaches every program, in reverse attach order, and frees the maps.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for i := len(e.attached) - 1; i >= 0; i-- {
		errs = append(errs, e.attached[i].close())
	}
	e.attached = nil
	for name, m := range e.maps {
		errs = append(errs, m.Close())
		delete(e.maps, name)
	}
	return errors.Join(errs...)
}
