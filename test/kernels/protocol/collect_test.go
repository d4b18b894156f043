// SPDX-License-Identifier: Apache-2.0

package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// console is what a guest prints: kernel lines, markers written by Emit,
// and `go test -v` output, including a skip through testenv.Unsupported.
func console(t *testing.T) string {
	var b bytes.Buffer
	b.WriteString("[    0.000000] Linux version 6.1.0-50-cloud-amd64\n")
	emit := func(e Event) {
		if err := Emit(&b, e); err != nil {
			t.Fatal(err)
		}
	}
	emit(Event{Kind: Booted, Seconds: 2.5})
	emit(Event{Kind: DoctorReport, Doctor: json.RawMessage(`{"kernel":"6.1.0","probes":[]}`)})
	emit(Event{Kind: Unsupported, Backend: "tracepoint", Reason: "tp_btf: load: EPERM"})
	emit(Event{Kind: SameAsAuto, Backend: "fentry", Reason: "auto chose fentry for all 7 hooks"})
	emit(Event{Kind: Begin, Suite: "example/pkg", Backend: "fentry"})
	b.WriteString(`=== RUN   TestA
--- PASS: TestA (0.01s)
=== RUN   TestB
    b_test.go:10: netfilter hook missing
--- SKIP: TestB (0.00s)
=== RUN   TestC
    c_test.go:12: unsupported: ip-start: netfilter link: invalid argument
--- SKIP: TestC (0.00s)
=== RUN   TestE
    e_test.go:7: not in the guest image: promtool (host-only tool; the host suites run this test)
--- SKIP: TestE (0.00s)
=== RUN   TestD
=== RUN   TestD/sub
    d_test.go:20: got 3 packets, want 4
    --- FAIL: TestD/sub (0.02s)
--- FAIL: TestD (0.02s)
FAIL
no newline at the end`)
	emit(Event{Kind: End, Suite: "example/pkg", Backend: "fentry", ExitCode: 1, Seconds: 0.5})
	emit(Event{Kind: Done, Seconds: 4})
	b.WriteString("[    4.300000] reboot: Power down\n")
	return b.String()
}

func collect(t *testing.T, text string) Result {
	var c Collector
	if err := Lines(strings.NewReader(text), c.Line); err != nil {
		t.Fatal(err)
	}
	return c.Result
}

func TestCollectorReadsAGuestRun(t *testing.T) {
	r := collect(t, console(t))
	if !r.Done || r.BootSeconds != 2.5 || r.Panic != "" || len(r.Failures) != 0 {
		t.Fatalf("result %+v", r)
	}
	if string(r.Doctor) != `{"kernel":"6.1.0","probes":[]}` {
		t.Fatalf("doctor %s", r.Doctor)
	}
	if len(r.Unsupported) != 1 || r.Unsupported[0].Backend != "tracepoint" || r.Unsupported[0].Reason != "tp_btf: load: EPERM" {
		t.Fatalf("unsupported %+v", r.Unsupported)
	}
	if len(r.SameAsAuto) != 1 || r.SameAsAuto[0].Backend != "fentry" {
		t.Fatalf("same as auto %+v", r.SameAsAuto)
	}
	if len(r.Runs) != 1 {
		t.Fatalf("runs %+v", r.Runs)
	}
	run := r.Runs[0]
	if !run.Ended || run.ExitCode != 1 || run.Seconds != 0.5 || run.Suite != "example/pkg" || run.Backend != "fentry" {
		t.Fatalf("run %+v", run)
	}
	want := []struct{ name, status string }{
		{"TestA", Pass}, {"TestB", Skip}, {"TestC", Skip}, {"TestE", Skip}, {"TestD/sub", Fail}, {"TestD", Fail},
	}
	if len(run.Tests) != len(want) {
		t.Fatalf("tests %+v", run.Tests)
	}
	for i, w := range want {
		if run.Tests[i].Name != w.name || run.Tests[i].Status != w.status {
			t.Errorf("test %d = %+v, want %s %s", i, run.Tests[i], w.name, w.status)
		}
	}
	if _, ok := run.Tests[1].Unsupported(); ok {
		t.Error("a plain skip counted as unsupported")
	}
	if reason, ok := run.Tests[2].Unsupported(); !ok || reason != "ip-start: netfilter link: invalid argument" {
		t.Errorf("unsupported reason %q, %v", reason, ok)
	}
	for i, want := range [][2]string{
		{"skipped", "b_test.go:10: netfilter hook missing"},
		{"unsupported", "ip-start: netfilter link: invalid argument"},
		{"not in the guest image", "promtool (host-only tool; the host suites run this test)"},
	} {
		if kind, reason := run.Tests[1+i].SkipKind(); kind != want[0] || reason != want[1] {
			t.Errorf("%s: skip kind %q, reason %q; want %q", run.Tests[1+i].Name, kind, reason, want)
		}
	}
	if _, ok := run.Tests[2].NotInGuest(); ok {
		t.Error("an unsupported skip counted as not in the guest image")
	}
	if got := run.Tests[4].Messages; len(got) != 1 || got[0] != "d_test.go:20: got 3 packets, want 4" {
		t.Errorf("failure messages %q", got)
	}
}

func TestCollectorNoticesPanicsAndMangledMarkers(t *testing.T) {
	r := collect(t, Prefix+`{"kind":"begin","suite":"p","backend":"auto"}
=== RUN   TestX
[    3.1] Kernel panic - not syncing: Fatal exception in interrupt
`+Prefix+`{"kind":"end","sui
`+Prefix+`{"kind":"end","suite":"other","backend":"auto"}
`)
	if !strings.HasPrefix(r.Panic, "[    3.1] Kernel panic - not syncing") {
		t.Errorf("panic %q", r.Panic)
	}
	if r.Done || len(r.Runs) != 1 || r.Runs[0].Ended {
		t.Errorf("result %+v", r)
	}
	if len(r.Failures) != 2 || !strings.Contains(r.Failures[0], "malformed marker") ||
		!strings.Contains(r.Failures[1], "without its begin") {
		t.Errorf("failures %q", r.Failures)
	}
}

// An unexpected breakpoint oopses without "Oops: " before 6.11; the report
// that follows the first oops line is kept for the host to classify.
func TestCollectorKeepsThePanicReport(t *testing.T) {
	r := collect(t, `=== RUN   TestX
[   40.1] int3: 0000 [#1] SMP NOPTI
[   40.2] RIP: 0010:inet_sk_state_store+0x13/0x90
[   40.3] Kernel panic - not syncing: Fatal exception in interrupt
`)
	want := []string{"[   40.1] int3: 0000 [#1] SMP NOPTI", "[   40.2] RIP: 0010:inet_sk_state_store+0x13/0x90",
		"[   40.3] Kernel panic - not syncing: Fatal exception in interrupt"}
	if r.Panic != want[0] || strings.Join(r.PanicReport, "\n") != strings.Join(want, "\n") {
		t.Errorf("panic %q, report %q", r.Panic, r.PanicReport)
	}
}
