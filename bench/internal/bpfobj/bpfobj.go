// SPDX-License-Identifier: Apache-2.0

// Package bpfobj finds the BPF programs and maps a process holds, and reads
// what the kernel accounts for them: run time per invocation (with run-time
// statistics enabled) and locked memory.
package bpfobj

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/bpffd"
)

// Held is the set of BPF objects reachable from a process's file
// descriptors: programs (directly or through links) and maps.
type Held struct {
	Progs []ebpf.ProgramID
	Maps  []ebpf.MapID
}

// HeldBy lists the BPF objects process pid holds: programs (directly or
// through links) and maps.
func HeldBy(pid int) (Held, error) {
	objs, err := bpffd.Held(pid)
	if err != nil {
		return Held{}, err
	}
	var h Held
	for _, o := range objs {
		if o.ProgID != 0 && !slices.Contains(h.Progs, ebpf.ProgramID(o.ProgID)) {
			h.Progs = append(h.Progs, ebpf.ProgramID(o.ProgID))
		}
		if o.MapID != 0 && !slices.Contains(h.Maps, ebpf.MapID(o.MapID)) {
			h.Maps = append(h.Maps, ebpf.MapID(o.MapID))
		}
	}
	slices.Sort(h.Progs)
	slices.Sort(h.Maps)
	return h, nil
}

// EnableStats turns on the kernel's per-program run-time accounting until
// the returned Closer is closed. It uses BPF_ENABLE_STATS, which counts as
// kernel.bpf_stats_enabled=1 while the descriptor is open, so the sysctl is
// never left on, even if the benchmark is killed.
func EnableStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enabling BPF run-time statistics: %w", err)
	}
	return c, nil
}

// ProgStat is one program's accumulated statistics at one moment.
type ProgStat struct {
	ID       ebpf.ProgramID
	Name     string
	Type     ebpf.ProgramType
	Runs     uint64
	Runtime  time.Duration
	Size     int    // instructions in the program as loaded (xlated), subprograms included
	Verified uint32 // instructions the verifier processed: how many paths it had to walk
}

// Stats reads the statistics of the given programs. A program unloaded
// meanwhile is left out.
func Stats(ids []ebpf.ProgramID) ([]ProgStat, error) {
	var out []ProgStat
	for _, id := range ids {
		p, err := ebpf.NewProgramFromID(id)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("program %d: %w", id, err)
		}
		info, err := p.Info()
		var st *ebpf.ProgramStats
		if err == nil {
			st, err = p.Stats()
		}
		p.Close()
		if err != nil {
			return nil, fmt.Errorf("program %d: %w", id, err)
		}
		verified, _ := info.VerifiedInstructions()
		insns, err := info.Instructions()
		if err != nil {
			return nil, fmt.Errorf("program %d instructions: %w", id, err)
		}
		out = append(out, ProgStat{ID: id, Name: info.Name, Type: info.Type,
			Runs: st.RunCount, Runtime: st.Runtime, Size: len(insns), Verified: verified})
	}
	return out, nil
}

// Cost is what one program cost over a measurement window.
type Cost struct {
	ProgStat
	RunsPerSec float64
	NsPerRun   float64
}

// Costs compares two Stats readings taken window apart. Programs that did
// not run are kept, with zero cost, so a silent hook is visible.
func Costs(before, after []ProgStat, window time.Duration) []Cost {
	var out []Cost
	for _, a := range after {
		i := slices.IndexFunc(before, func(b ProgStat) bool { return b.ID == a.ID })
		if i < 0 {
			continue // loaded during the window: no baseline
		}
		b := before[i]
		c := Cost{ProgStat: a}
		c.Runs = a.Runs - b.Runs
		c.Runtime = a.Runtime - b.Runtime
		c.RunsPerSec = float64(c.Runs) / window.Seconds()
		if c.Runs > 0 {
			c.NsPerRun = float64(c.Runtime.Nanoseconds()) / float64(c.Runs)
		}
		out = append(out, c)
	}
	return out
}

// Memlock is the memory the kernel charges for a process's BPF objects.
type Memlock struct {
	Maps, Progs   uint64 // bytes
	NMaps, NProgs int
}

// MemlockOf sums bytes_memlock over the objects in h.
func MemlockOf(h Held) (Memlock, error) {
	var m Memlock
	var err error
	if m.Maps, m.NMaps, err = sumMemlock(h.Maps, ebpf.NewMapFromID, (*ebpf.Map).Info); err != nil {
		return m, err
	}
	m.Progs, m.NProgs, err = sumMemlock(h.Progs, ebpf.NewProgramFromID, (*ebpf.Program).Info)
	return m, err
}

// sumMemlock opens each object by id and adds up what its info reports as
// locked; objects gone meanwhile are left out.
func sumMemlock[ID ~uint32, O io.Closer, I interface{ Memlock() (uint64, bool) }](
	ids []ID, open func(ID) (O, error), info func(O) (I, error)) (total uint64, n int, err error) {
	for _, id := range ids {
		obj, err := open(id)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return total, n, fmt.Errorf("BPF object %d: %w", id, err)
		}
		in, err := info(obj)
		obj.Close()
		if err != nil {
			return total, n, fmt.Errorf("BPF object %d: %w", id, err)
		}
		bytes, _ := in.Memlock()
		total += bytes
		n++
	}
	return total, n, nil
}

// Empty is a program that does nothing, attached to a raw tracepoint: its
// run time per invocation is the floor that the accounting itself and the
// dispatch into BPF cost, against which other programs' figures read.
type Empty struct {
	prog *ebpf.Program
	link link.Link
}

// LoadEmpty loads a program of type typ (expected at attach) that returns
// result at once: 0 for tracing, 1 for cgroup_skb's "allow" and
// netfilter's NF_ACCEPT.
func LoadEmpty(typ ebpf.ProgramType, attach ebpf.AttachType, result int32) (*ebpf.Program, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "stb_empty",
		Type:         typ,
		AttachType:   attach,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, result), asm.Return()},
	})
	if err != nil {
		return nil, fmt.Errorf("loading an empty %s program: %w", typ, err)
	}
	return prog, nil
}

// AttachEmpty attaches an empty program to the raw tracepoint tp.
func AttachEmpty(tp string) (*Empty, error) {
	prog, err := LoadEmpty(ebpf.RawTracepoint, ebpf.AttachNone, 0)
	if err != nil {
		return nil, err
	}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: prog})
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("attaching the empty program to %s: %w", tp, err)
	}
	return &Empty{prog: prog, link: l}, nil
}

// ID is the empty program's id, for Stats.
func (e *Empty) ID() (ebpf.ProgramID, error) {
	info, err := e.prog.Info()
	if err != nil {
		return 0, err
	}
	id, _ := info.ID()
	return id, nil
}

// Close detaches and unloads it.
func (e *Empty) Close() error {
	e.link.Close()
	return e.prog.Close()
}
