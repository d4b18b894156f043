// SPDX-License-Identifier: Apache-2.0

package protocol

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/stacktop/stacktop/internal/testenv"
)

// Test outcomes as `go test -v` prints them.
const (
	Pass = "PASS"
	Fail = "FAIL"
	Skip = "SKIP"
)

// Test is the outcome of one test function or subtest.
type Test struct {
	Name     string
	Status   string
	Messages []string // what the test logged, trimmed
}

// Unsupported reports whether the test skipped through testenv.Unsupported
// because the kernel lacks what it needs, and why.
func (t Test) Unsupported() (string, bool) { return t.skippedWith(testenv.UnsupportedPrefix) }

// NotInGuest reports whether the test skipped because it needs something the
// guest image ships by design not (a host-only tool, through
// testenv.RequireTool), and what.
func (t Test) NotInGuest() (string, bool) { return t.skippedWith(testenv.NotInGuestPrefix) }

// SkipKind classifies a skip for the reports: "unsupported" (the kernel
// lacks it), "not in the guest image" (the image lacks it) or "skipped"
// (anything else), with the reason.
func (t Test) SkipKind() (kind, reason string) {
	if r, ok := t.Unsupported(); ok {
		return "unsupported", r
	}
	if r, ok := t.NotInGuest(); ok {
		return strings.TrimSuffix(testenv.NotInGuestPrefix, ": "), r
	}
	return "skipped", strings.Join(t.Messages, " ")
}

func (t Test) skippedWith(prefix string) (string, bool) {
	if t.Status != Skip {
		return "", false
	}
	for _, m := range t.Messages {
		if _, reason, ok := strings.Cut(m, prefix); ok {
			return reason, true
		}
	}
	return "", false
}

// Run is one suite binary run with one backend.
type Run struct {
	Suite    string
	Backend  string
	Ended    bool
	ExitCode int
	Seconds  float64
	Tests    []Test
	Output   []string // every console line while it ran, for failure reports

	current string              // test that logs go to
	logs    map[string][]string // messages per test name until its result line
}

// Result is everything one guest boot reported.
type Result struct {
	BootSeconds float64
	Doctor      json.RawMessage
	Unsupported []Event // backends the kernel cannot run at all
	SameAsAuto  []Event // backends not run again because auto chose them everywhere
	Runs        []*Run
	Failures    []string // guest-level failures: malformed markers, init errors, panics
	Panic       string   // first kernel panic/oops line
	// PanicReport is the console from Panic on (at most maxPanicReport
	// lines): the oops's trap, registers and call trace, which tell an
	// emulator fault from a kernel bug our programs hit.
	PanicReport []string
	// Stall holds the lockup, RCU stall and hung-task reports, from the
	// first on, with where each CPU they dumped was; nil if there were none.
	Stall *Stall
	Done  bool
}

var (
	testStart  = regexp.MustCompile(`^=== (?:RUN|CONT|NAME)\s+(\S+)`)
	testResult = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)
	// Before 6.11 an unexpected breakpoint oopses as "int3: 0000 [#1]",
	// without "Oops: ".
	panicLine = regexp.MustCompile(`Kernel panic - not syncing|BUG: |Oops: |general protection fault|\bint3: [0-9a-f]{4} \[#\d+\]`)
)

// maxPanicReport bounds PanicReport: an oops with its trace, registers and
// the panic that follows is 50–100 lines.
const maxPanicReport = 120

// Collector turns console lines into a Result.
type Collector struct {
	Result Result
	run    *Run
	stall  stallParser
}

// Line consumes one console line.
func (c *Collector) Line(line string) {
	if c.Result.Panic == "" && panicLine.MatchString(line) {
		c.Result.Panic = strings.TrimSpace(line)
	}
	if c.Result.Stall == nil && stallHeader.MatchString(line) {
		c.Result.Stall = &Stall{First: strings.TrimSpace(line)}
	}
	if c.Result.Stall != nil {
		c.Result.Stall.line(&c.stall, line)
	}
	if c.Result.Panic != "" && len(c.Result.PanicReport) < maxPanicReport {
		c.Result.PanicReport = append(c.Result.PanicReport, line)
	}
	e, ok, err := ParseMarker(line)
	if err != nil {
		c.Result.Failures = append(c.Result.Failures, err.Error())
		return
	}
	if !ok {
		if c.run != nil {
			c.run.line(line)
		}
		return
	}
	switch e.Kind {
	case Booted:
		c.Result.BootSeconds = e.Seconds
	case DoctorReport:
		c.Result.Doctor = e.Doctor
	case Unsupported:
		c.Result.Unsupported = append(c.Result.Unsupported, e)
	case SameAsAuto:
		c.Result.SameAsAuto = append(c.Result.SameAsAuto, e)
	case Begin:
		c.run = &Run{Suite: e.Suite, Backend: e.Backend, logs: map[string][]string{}}
		c.Result.Runs = append(c.Result.Runs, c.run)
	case End:
		if c.run == nil || c.run.Suite != e.Suite || c.run.Backend != e.Backend {
			c.Result.Failures = append(c.Result.Failures, fmt.Sprintf("end of %s/%s without its begin", e.Suite, e.Backend))
			return
		}
		c.run.Ended, c.run.ExitCode, c.run.Seconds = true, e.ExitCode, e.Seconds
		c.run = nil
	case Failure:
		c.Result.Failures = append(c.Result.Failures, e.Reason)
	case Done:
		c.Result.Done = true
	default:
		c.Result.Failures = append(c.Result.Failures, "unknown marker kind "+e.Kind)
	}
}

func (r *Run) line(line string) {
	r.Output = append(r.Output, line)
	if m := testStart.FindStringSubmatch(line); m != nil {
		r.current = m[1]
		return
	}
	if m := testResult.FindStringSubmatch(line); m != nil {
		r.Tests = append(r.Tests, Test{Name: m[2], Status: m[1], Messages: r.logs[m[2]]})
		delete(r.logs, m[2])
		return
	}
	// With -test.v a test's log lines stream, indented, between its
	// "=== RUN" and its result line.
	if msg := strings.TrimSpace(line); msg != "" && r.current != "" && strings.HasPrefix(line, "    ") {
		r.logs[r.current] = append(r.logs[r.current], msg)
	}
}
