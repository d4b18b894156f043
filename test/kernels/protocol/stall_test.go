// SPDX-License-Identifier: Apache-2.0

package protocol

import (
	"os"
	"slices"
	"testing"
)

func collectFile(t *testing.T, name string) Result {
	t.Helper()
	f, err := os.Open("../testdata/console/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var c Collector
	if err := Lines(f, c.Line); err != nil {
		t.Fatal(err)
	}
	return c.Result
}

// The RCU stall report of a captured 6.1 console: the NMI backtrace of
// CPU 0 (caught in the int3 entry, its interrupted frame after it) and the
// stalled CPU 1's own dump, each with the code around its RIP; user-space
// frames and the unwinder's guesses are not where a CPU was.
func TestStallReadsEachCPUsDump(t *testing.T) {
	r := collectFile(t, "int3-loop-6.1.log")
	s := r.Stall
	if s == nil || s.First != "[  662.027837] rcu: INFO: rcu_preempt self-detected stall on CPU" || s.Reports != 1 {
		t.Fatalf("stall %+v", s)
	}
	if len(s.CPUs) != 2 {
		t.Fatalf("%d CPU dumps, want 2: %+v", len(s.CPUs), s.CPUs)
	}
	c0, c1 := s.CPUs[0], s.CPUs[1]
	if c0.CPU != 0 || c0.RIP != "asm_exc_int3+0x0/0x40" || !c0.Int3 ||
		c0.TrapRIP != "sk_filter_trim_cap+0x37/0x250" || c0.Ours != "" {
		t.Errorf("CPU 0: %+v", c0)
	}
	if at, before := CodeAt(c0.TrapCode); before != 0x66 || !slices.Equal(at[:2], []byte{0x90, 0x48}) {
		t.Errorf("CPU 0 trap code %q: at % x, before %x", c0.TrapCode, at, before)
	}
	if c1.CPU != 1 || c1.RIP != "sk_filter_trim_cap+0x36/0x250" || c1.Int3 || c1.TrapRIP != "" || c1.Ours != "" {
		t.Errorf("CPU 1: %+v", c1)
	}
	if at, _ := CodeAt(c1.Code); !slices.Equal(at[:2], []byte{0x66, 0x90}) {
		t.Errorf("CPU 1 code %q: at % x", c1.Code, at)
	}
	// The markers before the stall are read as ever.
	if r.BootSeconds != 6.52 || r.Doctor == nil || len(r.Runs) != 16 {
		t.Errorf("boot %v, doctor %v, %d runs", r.BootSeconds, r.Doctor != nil, len(r.Runs))
	}
}

// A CPU caught in the common exception entry is in the int3's when its
// trace names the int3 entry (here only as the unwinder's guess).
func TestStallInt3FromTheTrace(t *testing.T) {
	s := collectFile(t, "lockup-error-entry-6.1.log").Stall
	if s == nil || len(s.CPUs) != 2 {
		t.Fatalf("stall %+v", s)
	}
	if c := s.CPUs[0]; c.CPU != 0 || c.RIP != "error_entry+0xc6/0x130" || !c.Int3 || c.TrapRIP != "sk_filter_trim_cap+0x37/0x250" {
		t.Errorf("CPU 0: %+v", c)
	}
	if c := s.CPUs[1]; c.CPU != 1 || c.Int3 || c.TrapRIP != "" {
		t.Errorf("CPU 1: %+v", c)
	}
}

// Two reports of one CPU (a soft lockup, then an RCU stall) are two dumps;
// a console without any has no stall.
func TestStallCountsReports(t *testing.T) {
	s := collectFile(t, "lockup-jump-site-6.1.log").Stall
	if s == nil || s.Reports != 2 || len(s.CPUs) != 2 || s.Size() != len(s.Lines) {
		t.Fatalf("stall %+v", s)
	}
	for _, c := range s.CPUs {
		if c.CPU != 0 || c.RIP != "inet_create+0x259/0x380" {
			t.Errorf("dump %+v", c)
		}
	}
	if s := collectFile(t, "oops-outside-bpf-6.1.log").Stall; s != nil {
		t.Errorf("an oops read as a stall: %+v", s)
	}
	var none *Stall
	if none.Size() != 0 {
		t.Error("a nil stall has lines")
	}
}

func TestCodeAt(t *testing.T) {
	for _, tc := range []struct {
		code   string
		at     []byte
		before int
	}{
		{"e9 d4 fe ff ff <eb> 02 eb ce", []byte{0xeb, 0x02, 0xeb, 0xce}, 0xff},
		{"<0f> 1f 00 fc", []byte{0x0f, 0x1f, 0x00, 0xfc}, -1},
		{"Unable to access opcode bytes at 0x40aca4.", nil, -1},
	} {
		at, before := CodeAt(tc.code)
		if !slices.Equal(at, tc.at) || before != tc.before {
			t.Errorf("CodeAt(%q) = % x, %d; want % x, %d", tc.code, at, before, tc.at, tc.before)
		}
	}
}
