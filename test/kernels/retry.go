package main

import (
	"fmt"
	"path/filepath"
	"regexp"
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

// infrastructureFault says why a guest died of something outside the code
// under test, so that booting it again is fair: the kernel never reached our
// init, or TCG tripped over the kernel's live code patching. It returns ""
// for a pass and for every failure that is, or may be, the tests' own: a
// test that failed (never retried, whatever happened afterwards), a guest
// init failure, or any other oops or hang, which our BPF programs may have
// caused.
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
	return ""
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
// infrastructure fault; retrying is called before each repeat. It returns
// the last boot and the ones it replaced.
func bootRetrying(cfg config, boot func(n int) (*bootResult, error), retrying func(attempt)) (*bootResult, []attempt, error) {
	var retried []attempt
	for n := 1; ; n++ {
		res, err := boot(n)
		if err != nil {
			return res, retried, err
		}
		fault := infrastructureFault(res, cfg.kernelTimeout)
		if fault == "" || n > cfg.retries {
			return res, retried, nil
		}
		a := attempt{res: res, fault: fault}
		retrying(a)
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
