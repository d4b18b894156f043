package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
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

// ourFrame matches an oops line that puts one of our BPF programs (or the
// trampoline that calls it) on the faulting path: the trapping RIP, or a
// call-trace frame the unwinder is sure of (it marks guesses with "? ").
var ourFrame = regexp.MustCompile(`RIP: [0-9a-f]{4}:bpf_(prog|trampoline)_|\]\s+bpf_(prog|trampoline)_|^\s+bpf_(prog|trampoline)_`)

// infrastructureFault says why a guest died of something outside the code
// under test, so that booting it again is fair: the kernel never reached our
// init, TCG tripped over the kernel's live code patching, or the kernel
// oopsed with none of our programs on the faulting path (in one CI run 6.1
// dereferenced a socket's NULL sk_security in AppArmor's recvmsg hook, in a
// test that passes on every other boot). It returns "" for a pass and for
// every failure that is, or may be, the tests' own: a test that failed
// (never retried, whatever happened afterwards), a guest init failure, a
// hang or lockup (our programs have soft-locked a guest before), or an oops
// in or under one of our BPF programs. A retried oops stays in the report
// with its console log, and one that repeats on every boot fails the run.
func infrastructureFault(r *bootResult, timeout time.Duration) string {
	if len(r.problems(timeout)) == 0 || r.testsFailed() || len(r.Failures) > 0 {
		return ""
	}
	if r.BootSeconds == 0 && r.Doctor == nil && len(r.Runs) == 0 {
		return "the guest never reached init: " + r.death(timeout)
	}
	for _, line := range r.PanicReport {
		if strayInt3.MatchString(line) {
			return "stray int3 trap from the kernel's live code patching under TCG: " + strings.TrimSpace(line)
		}
	}
	// A lockup is never retried, except this one: a CPU looping on a
	// breakpoint nothing but live patching sets, none of our programs on
	// the report's path.
	if r.Int3Loop != "" && !slices.ContainsFunc(r.PanicReport, ourFrame.MatchString) {
		return "stray int3 trap from the kernel's live code patching under TCG, a CPU trapping on it in a loop: " + r.Panic
	}
	if r.TimedOut || !slices.ContainsFunc(r.PanicReport, fatalOops.MatchString) ||
		slices.ContainsFunc(r.PanicReport, ourFrame.MatchString) {
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
