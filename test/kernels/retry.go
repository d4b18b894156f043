// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stacktop/stacktop/test/kernels/protocol"
)

// strayInt3 matches the kernel's report of a breakpoint trap it did not
// expect ("Oops: int3: 0000 [#1]" since 6.11, "int3: 0000 [#1]" before).
// Nothing in the guest sets breakpoints: the kernel's live code patching
// (text_poke_bp, for static keys, tracepoints and BPF trampolines) writes a
// temporary int3, and under qemu's TCG a vCPU can still run a translation of
// the code taken while the int3 was there after the patch has completed and
// the kernel no longer claims it.
var strayInt3 = regexp.MustCompile(`\bint3: [0-9a-f]{4} \[#\d+\]|text_poke|poke_int3_handler`)

// fatalOops matches the panic that ends a guest whose kernel oopsed (the
// guest boots with oops=panic); a lockup or a hung task does not end so.
var fatalOops = regexp.MustCompile(`Kernel panic - not syncing: Fatal exception`)

// infrastructureFault says why a guest died of something outside the code
// under test, so that booting it again is fair: the kernel never reached our
// init, TCG tripped over the kernel's live code patching (an oops on a
// stray int3, or CPUs looping on one: lockupFault), or the kernel oopsed
// with none of our programs on the faulting path (in one CI run 6.1
// dereferenced a socket's NULL sk_security in AppArmor's recvmsg hook, in a
// test that passes on every other boot). It returns "" for a pass and for
// every failure that is, or may be, the tests' own: a test that failed
// (never retried, whatever happened afterwards), a guest init failure, a
// hang or any other lockup (our programs may lock a guest up), or an oops
// in or under one of our BPF programs. A retried oops stays in the report
// with its console log, and one that repeats on every boot fails the run.
func infrastructureFault(r *bootResult, timeout time.Duration) string {
	if len(r.problems(timeout)) == 0 || r.testsFailed() || len(r.Failures) > 0 {
		return ""
	}
	if r.BootSeconds == 0 && r.Doctor == nil && len(r.Runs) == 0 {
		return "the guest never reached init: " + r.death(timeout)
	}
	// An oops, that is: a lockup's report may name the int3 machinery
	// too (a CPU in text_poke, an unwinder's guess), and is judged below.
	for _, line := range r.PanicReport {
		if strayInt3.MatchString(line) && !protocol.IsStall(r.Panic) {
			return "stray int3 trap from the kernel's live code patching under TCG: " + strings.TrimSpace(line)
		}
	}
	// A lockup is never retried, except this one: a vCPU looping on a
	// breakpoint nothing but live patching sets, none of our programs on
	// any reported CPU's path.
	if fault := lockupFault(r.Stall); fault != "" {
		return "a vCPU looping on a stray int3 of the kernel's live code patching under TCG: " + fault
	}
	if r.TimedOut || !slices.ContainsFunc(r.PanicReport, fatalOops.MatchString) ||
		slices.ContainsFunc(r.PanicReport, protocol.OurFrame.MatchString) {
		return ""
	}
	where := ""
	if i := slices.IndexFunc(r.PanicReport, func(l string) bool { return strings.Contains(l, "RIP: ") }); i >= 0 {
		where = " at " + strings.TrimSpace(r.PanicReport[i][strings.Index(r.PanicReport[i], "RIP: "):])
	}
	return "kernel oops outside our BPF programs: " + r.Panic + where
}

// finished returns the runs that ended, all passed, before the guest died.
func (r *bootResult) finished() []*protocol.Run {
	var done []*protocol.Run
	for _, run := range r.Runs {
		if run.Ended && run.ExitCode == 0 {
			done = append(done, run)
		}
	}
	return done
}

// testsFailed reports whether any test failed or any suite exited non-zero.
func (r *bootResult) testsFailed() bool {
	for _, run := range r.Runs {
		if run.Ended && run.ExitCode != 0 {
			return true
		}
		for _, t := range run.Tests {
			if t.Status == protocol.Fail {
				return true
			}
		}
	}
	return false
}

// death says in one line how a guest that did not finish ended.
func (r *bootResult) death(timeout time.Duration) string {
	switch {
	case r.Panic != "":
		return r.Panic
	case r.TimedOut:
		return "hung, killed after " + timeout.String()
	case r.ExitErr != nil:
		return r.ExitErr.Error()
	default:
		return "the console ended without a panic"
	}
}

// attempt is a guest boot that died of an infrastructure fault and was
// booted again.
type attempt struct {
	res   *bootResult
	fault string
}

// bootRetrying boots a guest (boot's argument counts the attempts from 1)
// and boots it again, up to cfg.retries times, while it dies of an
// infrastructure fault. retrying is called before each repeat, with the
// runs the dead guest finished, so that the next boot runs only the rest:
// a retry costs what was lost, not the whole guest again. It returns the
// last boot, with the runs finished by the ones it replaced first, and
// those boots.
func bootRetrying(cfg config, boot func(n int) (*bootResult, error), retrying func(a attempt, finished []*protocol.Run) error) (*bootResult, []attempt, error) {
	var retried []attempt
	var finished []*protocol.Run
	for n := 1; ; n++ {
		res, err := boot(n)
		if err != nil {
			return res, retried, err
		}
		fault := infrastructureFault(res, cfg.kernelTimeout)
		if fault == "" || n > cfg.retries {
			res.Runs = append(finished, res.Runs...)
			return res, retried, nil
		}
		a := attempt{res: res, fault: fault}
		finished = append(finished, res.finished()...)
		if err := retrying(a, finished); err != nil {
			return res, retried, err
		}
		retried = append(retried, a)
	}
}

// consoleLog names each attempt's console log, so a retry keeps the log of
// the boot it replaces.
func consoleLog(work, kernel string, n int) string {
	if n == 1 {
		return filepath.Join(work, "console-"+kernel+".log")
	}
	return filepath.Join(work, fmt.Sprintf("console-%s-attempt%d.log", kernel, n))
}

// lockupFault says why a guest's stall reports show an emulator fault, or
// "" when they do not, or when any of our BPF programs is on a reported
// CPU's path.
//
// Under TCG a vCPU can go on running a translation of kernel code taken
// while text_poke_bp() had its temporary int3 at a static key, after the
// patch is complete (QEMU fixed the race in 8.1, "accel/tcg: Always lock
// pages before translation"; Debian 12 ships 7.2). Kernels from 6.3 oops
// on such an int3 (see strayInt3). Older ones (5.10 and 6.1 here) loop:
// kprobe_int3_handler() finds no int3 in memory any more, takes it for a
// breakpoint removed right after it was hit, and backs the CPU up to run
// the instruction again, which the emulator runs as the int3 again,
// forever ("x86/kprobes: Drop removed INT3 handling code", 6.3, removed
// that back-up). The reports show the loop in one of two ways:
//   - a CPU caught handling an int3 whose interrupted frame is one byte
//     into a static key's nop or jump: it trapped on an int3 that is no
//     longer in memory;
//   - CPUs found at the same address in dumps taken at two different
//     times, where the code is a static key's 2- or 5-byte nop or jump:
//     such an instruction cannot hold a CPU, only the back-up can bring it
//     there again and again (one report may dump a CPU twice at once).
func lockupFault(s *protocol.Stall) string {
	if s == nil || slices.ContainsFunc(s.CPUs, func(c *protocol.CPUReport) bool { return c.Ours != "" }) {
		return ""
	}
	for _, c := range s.CPUs {
		if !c.Int3 || c.TrapRIP == "" {
			continue
		}
		at, before := protocol.CodeAt(c.TrapCode)
		if insn := jumpSite(append([]byte{byte(before)}, at...)); before >= 0 && insn != "" {
			return fmt.Sprintf("CPU %d trapped on an int3 at %s, where memory holds a static key's %s (%s)",
				c.CPU, int3Address(c.TrapRIP), insn, s.First)
		}
	}
	first := map[string]*protocol.CPUReport{} // per address, the first dump there
	for _, c := range s.CPUs {
		at, _ := protocol.CodeAt(c.Code)
		insn := jumpSite(at)
		if insn == "" {
			continue
		}
		f := first[c.RIP]
		if f == nil {
			first[c.RIP] = c
			continue
		}
		if f.Time != c.Time {
			cpus := fmt.Sprintf("CPU %d", c.CPU)
			if f.CPU != c.CPU {
				cpus = fmt.Sprintf("CPUs %d and %d", f.CPU, c.CPU)
			}
			return fmt.Sprintf("%s stuck at %s, a static key's %s, at %ss and %ss (%s)", cpus, c.RIP, insn, f.Time, c.Time, s.First)
		}
	}
	return ""
}

// jumpSite describes the instruction starting at code when it is one that
// live patching writes at a static key (jump label): a 2- or 5-byte nop,
// or a short or near jump that does not jump to itself; "" otherwise.
func jumpSite(code []byte) string {
	hex := func(n int) string { return fmt.Sprintf("% x", code[:n]) }
	switch {
	case len(code) >= 2 && code[0] == 0x66 && code[1] == 0x90:
		return "2-byte nop (" + hex(2) + ")"
	case len(code) >= 5 && (string(code[:5]) == "\x0f\x1f\x44\x00\x00" || string(code[:5]) == "\x66\x66\x66\x66\x90"):
		// P6 and K8 5-byte nops: before 5.14 the kernel chose its atomic
		// nop by CPU, and 5.10 under qemu64 takes the K8 one.
		return "5-byte nop (" + hex(5) + ")"
	case len(code) >= 2 && code[0] == 0xeb && code[1] != 0xfe:
		return "short jump (" + hex(2) + ")"
	case len(code) >= 5 && code[0] == 0xe9 && string(code[1:5]) != "\xfb\xff\xff\xff":
		return "jump (" + hex(5) + ")"
	}
	return ""
}

// int3Address names the int3 an interrupted frame's RIP comes after:
// "sk_filter_trim_cap+0x37/0x250" gives "sk_filter_trim_cap+0x36".
func int3Address(rip string) string {
	fn, off, ok := strings.Cut(strings.Split(rip, "/")[0], "+0x")
	n, err := strconv.ParseUint(off, 16, 64)
	if !ok || err != nil || n == 0 {
		return "the instruction before " + rip
	}
	return fmt.Sprintf("%s+%#x", fn, n-1)
}
