// SPDX-License-Identifier: Apache-2.0

package attach

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/testenv"
)

// The test object: tp_btf programs that use one map, one whose target
// the kernel does not have, so that it is refused at load, and one that
// reads a constant.
const (
	progState   = "state"   // inet_sock_set_state
	progOther   = "other"   // sock_rcvqueue_full in its section; tests retarget it
	progMissing = "missing" // a function no kernel has
	progConst   = "const"   // inet_sock_set_state, reads varValue
	mapCounts   = "counts"
	mapRodata   = ".rodata"
	varValue    = "value" // a volatile const __u64 in .rodata
)

func testSpec() *ebpf.CollectionSpec {
	prog := func(target string) *ebpf.ProgramSpec {
		return &ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: target, License: "GPL",
			Instructions: asm.Instructions{
				asm.LoadMapPtr(asm.R1, 0).WithReference(mapCounts), // the map is shared, not the program's own
				asm.Mov.Imm(asm.R0, 0),
				asm.Return(),
			}}
	}
	constant := prog("inet_sock_set_state")
	constant.Instructions = asm.Instructions{
		asm.LoadMapValue(asm.R1, 0, 0).WithReference(mapRodata),
		asm.LoadMem(asm.R0, asm.R1, 0, asm.DWord),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	}
	return &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			mapCounts: {Name: mapCounts, Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1},
			mapRodata: {Name: mapRodata, Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1,
				Flags: unix.BPF_F_RDONLY_PROG, Contents: []ebpf.MapKV{{Key: uint32(0), Value: make([]byte, 8)}}},
		},
		Variables: map[string]*ebpf.VariableSpec{
			varValue: {Name: varValue, SectionName: mapRodata, Value: make([]byte, 8)},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			progState:   prog("inet_sock_set_state"),
			progOther:   prog("sock_rcvqueue_full"),
			progMissing: prog("stacktop_no_such_function"),
			progConst:   constant,
		},
	}
}

func load(t *testing.T) *Engine {
	t.Helper()
	testenv.RequireRoot(t)
	e, err := Load(testSpec(), Netns{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func attachedNames(e *Engine) []string {
	var names []string
	for _, a := range e.Attached() {
		names = append(names, a.Name)
	}
	return names
}

func tracing(name string) Program { return Program{Name: name, Kind: Tracing} }

// TestRefusedBackendLeavesNothing: a backend whose second program the
// kernel refuses detaches its first again, the next backend is chosen, and
// the refusal is recorded with the reason.
func TestRefusedBackendLeavesNothing(t *testing.T) {
	e := load(t)
	h := &Hook{Name: "h", Backends: []Backend{
		{Backend: features.FentryBE, Programs: []Program{tracing(progState), tracing(progMissing)}},
		{Backend: features.Tracepoint, Programs: []Program{tracing(progOther)}},
	}}
	c, err := e.Attach(h, features.Auto)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if c.Backend != features.Tracepoint || len(c.Refused) != 1 || !strings.Contains(c.Refused[0].Reason, progMissing) {
		t.Errorf("choice %+v, want tracepoint after a refusal naming %s", c, progMissing)
	}
	if got := attachedNames(e); !slices.Equal(got, []string{progOther}) {
		t.Errorf("attached %v, want only %s", got, progOther)
	}
	if got := e.Choices(); len(got) != 1 || got[0].Hook != "h" {
		t.Errorf("choices %+v, want the one of h", got)
	}
}

// TestSharedProgramAttachesOnce: a program in two hooks' tables is
// attached by the first and serves the second; a failed hook does not
// take it away from the one that attached it.
func TestSharedProgramAttachesOnce(t *testing.T) {
	e := load(t)
	shared := tracing(progState)
	a := &Hook{Name: "a", Backends: []Backend{{Backend: features.Tracepoint, Programs: []Program{shared}}}}
	b := &Hook{Name: "b", Backends: []Backend{{Backend: features.Tracepoint, Programs: []Program{shared, tracing(progMissing)}}}}
	if _, err := e.Attach(a, features.Auto); err != nil {
		t.Fatalf("Attach a: %v", err)
	}
	if _, err := e.Attach(b, features.Auto); !errors.Is(err, features.ErrNoBackend) {
		t.Fatalf("Attach b: %v, want no backend", err)
	}
	if got := attachedNames(e); !slices.Equal(got, []string{progState}) {
		t.Errorf("attached %v, want %s once", got, progState)
	}
}

// TestOptionalProgram: an optional program the kernel refuses costs the
// hook that program only.
func TestOptionalProgram(t *testing.T) {
	e := load(t)
	missing := tracing(progMissing)
	missing.Optional = true
	h := &Hook{Name: "h", Backends: []Backend{{Backend: features.Tracepoint, Programs: []Program{tracing(progState), missing}}}}
	if c, err := e.Attach(h, features.Auto); err != nil || c.Backend != features.Tracepoint {
		t.Fatalf("Attach: %+v, %v", c, err)
	}
	if got := attachedNames(e); !slices.Equal(got, []string{progState}) {
		t.Errorf("attached %v, want %s", got, progState)
	}
}

// TestGateAndForcedBackend: a gate's reason is the backend's refusal, and a
// forced backend is the only one tried.
func TestGateAndForcedBackend(t *testing.T) {
	e := load(t)
	closed := errors.New("not on this kernel")
	h := &Hook{Name: "h", Backends: []Backend{
		{Backend: features.FentryBE, Gate: func() error { return closed }, Programs: []Program{tracing(progState)}},
		{Backend: features.Tracepoint, Programs: []Program{tracing(progOther)}},
	}}
	c, err := e.Attach(h, features.FentryBE)
	if !errors.Is(err, closed) || len(c.Refused) != 1 || c.Refused[0].Reason != closed.Error() {
		t.Errorf("forced fentry: %+v, %v; want refused %q", c, err, closed)
	}
	if got := attachedNames(e); len(got) != 0 {
		t.Errorf("attached %v, want nothing", got)
	}
}

// TestRuntimeTarget: a program attaches where Target says rather than
// where its section does — a user-defined probe is a table entry built at
// run time — once per target, and it uses the engine's map, not one of
// its own.
func TestRuntimeTarget(t *testing.T) {
	e := load(t)
	for _, target := range []string{"inet_sock_set_state", "sock_exceed_buf_limit", "inet_sock_set_state"} {
		p := tracing(progOther)
		p.Target = target
		h := &Hook{Name: "at " + target, Backends: []Backend{{Backend: features.Tracepoint, Programs: []Program{p}}}}
		if _, err := e.Attach(h, features.Auto); err != nil {
			t.Fatalf("Attach: %v", err)
		}
	}
	var targets []string
	for _, a := range e.Attached() {
		targets = append(targets, a.Target)
	}
	if want := []string{"inet_sock_set_state", "sock_exceed_buf_limit"}; !slices.Equal(targets, want) {
		t.Errorf("attached at %v, want %v", targets, want)
	}
	ids := mapsOf(t, e.Attached()[0].Program)
	var maps struct {
		Counts *ebpf.Map `ebpf:"counts"`
	}
	if err := e.AssignMaps(&maps); err != nil {
		t.Fatal(err)
	}
	if want := mapID(t, maps.Counts); !slices.Contains(ids, want) {
		t.Errorf("program uses maps %v, want the engine's %d among them", ids, want)
	}
}

// TestRuntimeConstants: a program given constants of its own is loaded
// with a .rodata of its own that holds them, once per set of values; without
// them it shares the engine's.
func TestRuntimeConstants(t *testing.T) {
	e := load(t)
	for _, v := range []map[string]any{{varValue: uint64(7)}, {varValue: uint64(9)}, {varValue: uint64(7)}, nil} {
		p := tracing(progConst)
		p.Constants = v
		h := &Hook{Name: fmt.Sprint("const ", v), Backends: []Backend{{Backend: features.Tracepoint, Programs: []Program{p}}}}
		if _, err := e.Attach(h, features.Auto); err != nil {
			t.Fatalf("Attach: %v", err)
		}
	}
	var shared struct {
		Rodata *ebpf.Map `ebpf:".rodata"`
	}
	if err := e.AssignMaps(&shared); err != nil {
		t.Fatal(err)
	}
	sharedID := mapID(t, shared.Rodata)
	var got []string
	for _, a := range e.Attached() {
		m := rodataOf(t, a.Program)
		id := mapID(t, m)
		var value uint64
		if err := m.Lookup(uint32(0), &value); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d shared=%v", value, id == sharedID))
	}
	if want := []string{"7 shared=false", "9 shared=false", "0 shared=true"}; !slices.Equal(got, want) {
		t.Errorf("attached programs' .rodata: %v, want %v", got, want)
	}
}

// TestOnly: a spec reduced to a hook's programs keeps the maps and the
// variables they use, no others, and an engine loaded from it attaches the
// hook.
func TestOnly(t *testing.T) {
	hook := func(programs ...string) Hook {
		h := Hook{Name: "h", Backends: []Backend{{Backend: features.Tracepoint}}}
		for _, p := range programs {
			h.Backends[0].Programs = append(h.Backends[0].Programs, tracing(p))
		}
		return h
	}
	keys := func(m map[string]*ebpf.MapSpec) []string { return slices.Sorted(maps.Keys(m)) }
	for _, tc := range []struct {
		programs, maps []string
		variables      int
	}{
		{[]string{progConst}, []string{mapRodata}, 1},
		{[]string{progState, progOther}, []string{mapCounts}, 0},
		{nil, nil, 0},
	} {
		one := Only(testSpec(), hook(tc.programs...))
		if got := slices.Sorted(maps.Keys(one.Programs)); !slices.Equal(got, slices.Sorted(slices.Values(tc.programs))) {
			t.Errorf("Only(%v): programs %v", tc.programs, got)
		}
		if got := keys(one.Maps); !slices.Equal(got, tc.maps) {
			t.Errorf("Only(%v): maps %v, want %v", tc.programs, got, tc.maps)
		}
		if len(one.Variables) != tc.variables {
			t.Errorf("Only(%v): %d variables, want %d", tc.programs, len(one.Variables), tc.variables)
		}
	}
	if n := len(testSpec().Maps); n != 2 {
		t.Fatalf("the test object has %d maps, want 2", n)
	}

	testenv.RequireRoot(t)
	p := tracing(progConst)
	p.Constants = map[string]any{varValue: uint64(7)}
	h := Hook{Name: "h", Backends: []Backend{{Backend: features.Tracepoint, Programs: []Program{p}}}}
	e, err := Load(Only(testSpec(), h), Netns{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer e.Close()
	if _, err := e.Attach(&h, features.Auto); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	var counts struct {
		Counts *ebpf.Map `ebpf:"counts"`
	}
	if err := e.AssignMaps(&counts); err == nil {
		t.Errorf("the engine has map %s, which the hook does not use", mapCounts)
	}
}

// mapsOf returns the ids of the maps program p uses.
func mapsOf(t *testing.T, p *ebpf.Program) []ebpf.MapID {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := info.MapIDs()
	return ids
}

// mapID returns the kernel's id of map m.
func mapID(t *testing.T, m *ebpf.Map) ebpf.MapID {
	t.Helper()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return id
}

// rodataOf opens the .rodata map program p uses.
func rodataOf(t *testing.T, p *ebpf.Program) *ebpf.Map {
	t.Helper()
	ids := mapsOf(t, p)
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		if mi, err := m.Info(); err == nil && mi.Name == mapRodata {
			return m
		}
	}
	t.Fatalf("program uses maps %v, none named %s", ids, mapRodata)
	return nil
}

// TestCheck: the table's mistakes are named.
func TestCheck(t *testing.T) {
	spec := testSpec()
	good := []Hook{{Name: "a", Backends: []Backend{{Backend: features.Tracepoint,
		Programs: []Program{tracing(progState), tracing(progOther), tracing(progMissing), tracing(progConst)}}}}}
	if err := Check(spec, good); err != nil {
		t.Errorf("Check(good): %v", err)
	}
	bad := []Hook{{Name: "b", Backends: []Backend{
		{Backend: features.FentryBE, Programs: []Program{tracing(progState), tracing("nope")}},
		{Backend: features.Tracepoint, Programs: []Program{{Name: progState, Kind: Iterator}, {Name: progOther, Kind: Tracepoint, Target: "x"}}},
	}}}
	err := Check(spec, bad)
	for _, want := range []string{"nope is not in the object", "program state attaches as", `tracepoint "x" is not category:name`,
		"program missing of the object serves no hook"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(bad) = %v, want it to say %q", err, want)
		}
	}
}

// TestClassicTracepoint: a Tracepoint program attaches at its
// "category:name", mounting tracefs where it is not; a target that is not
// category:name is refused.
func TestClassicTracepoint(t *testing.T) {
	testenv.RequireRoot(t)
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"tp": {Type: ebpf.TracePoint, License: "GPL", Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}},
	}}
	e, err := Load(spec, Netns{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	bad := &Hook{Name: "bad", Backends: []Backend{{Backend: features.Tracepoint,
		Programs: []Program{{Name: "tp", Kind: Tracepoint, Target: "inet_sock_set_state"}}}}}
	if _, err := e.Attach(bad, features.Auto); err == nil || !strings.Contains(err.Error(), "not category:name") {
		t.Errorf("Attach at a bare name: %v, want it refused", err)
	}
	good := &Hook{Name: "good", Backends: []Backend{{Backend: features.Tracepoint,
		Programs: []Program{{Name: "tp", Kind: Tracepoint, Target: "sock:inet_sock_set_state"}}}}}
	if _, err := e.Attach(good, features.Auto); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if got := attachedNames(e); !slices.Equal(got, []string{"tp"}) {
		t.Errorf("attached %v, want tp", got)
	}
}
