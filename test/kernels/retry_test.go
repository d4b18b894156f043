package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/test/kernels/debian"
	"github.com/stacktop/stacktop/test/kernels/protocol"
)

// guestDied reads a console log from testdata/console as the runner would
// have collected it from a guest whose qemu exited after the kernel
// panicked (panic=-1 with -no-reboot).
func guestDied(t *testing.T, name string) *bootResult {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "console", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var c protocol.Collector
	if err := protocol.Lines(f, c.Line); err != nil {
		t.Fatal(err)
	}
	return &bootResult{Result: c.Result, Wall: 30 * time.Second, Log: name}
}

// The console logs are real where a guest died that way (int3-at-boot-6.12,
// int3-in-suite-sid: captured from matrix runs, the sid one shortened) and
// built after the kernel's formats otherwise.
func TestInfrastructureFaultFromConsoles(t *testing.T) {
	for _, tc := range []struct {
		log   string
		fault string // "" when the guest must not be booted again
	}{
		// TCG ran a stale int3 of text_poke_bp while the kernel was still
		// booting: the guest never reached our init.
		{"int3-at-boot-6.12.log", "the guest never reached init: [   12.509882] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"},
		// The same in the middle of a suite, while connect() flipped the
		// inet_sock_set_state tracepoint's static key; no test had failed.
		{"int3-in-suite-sid.log", "stray int3 trap from the kernel's live code patching under TCG: [  282.503611] Oops: int3: 0000 [#1] SMP NOPTI"},
		// The kernel's boot ran out of memory: not our code either.
		{"oom-at-boot-6.1.log", "the guest never reached init: [    1.515827] Kernel panic - not syncing: System is deadlocked on memory"},
		// A NULL dereference in our BPF program's call path may be ours.
		{"null-deref-in-suite.log", ""},
		// One far from any of our programs (AppArmor's recvmsg hook, a
		// socket without its sk_security; captured in CI, a program of ours
		// only among the unwinder's guesses) is the kernel's or the emulator's.
		{"oops-outside-bpf-6.1.log", "kernel oops outside our BPF programs: [  116.639368] BUG: kernel NULL pointer dereference, address: 0000000000000000 at RIP: 0010:aa_sk_perm+0x5f/0x200"},
		// Both CPUs soft-locked in sk_filter_trim_cap at a static key's
		// nop while 6.1 attached and detached cgroup programs under churn;
		// the RCU stall's NMI backtrace before it shows the CPU in the int3
		// entry (captured in CI, cut after the second lockup report).
		{"int3-loop-6.1.log", "stray int3 trap from the kernel's live code patching under TCG, a CPU trapping on it in a loop: [  688.777437] watchdog: BUG: soft lockup - CPU#0 stuck for 45s! [internal_conntr:867]"},
		// A test failed before the emulator fault: a failure stays a failure.
		{"fail-then-int3.log", ""},
	} {
		if got := infrastructureFault(guestDied(t, tc.log), time.Minute); got != tc.fault {
			t.Errorf("%s: fault %q, want %q", tc.log, got, tc.fault)
		}
	}
}

func TestInfrastructureFaultOfHangsAndPasses(t *testing.T) {
	booted := protocol.Result{BootSeconds: 4, Doctor: []byte(`{}`), Runs: []*protocol.Run{{Suite: "p", Backend: "auto"}}}
	for _, tc := range []struct {
		name  string
		r     *bootResult
		fault string
	}{
		{"hung in kernel boot", &bootResult{TimedOut: true}, "the guest never reached init: hung, killed after 1m0s"},
		{"qemu died in kernel boot", &bootResult{ExitErr: os.ErrClosed}, "the guest never reached init: " + os.ErrClosed.Error()},
		{"hung in a suite", &bootResult{TimedOut: true, Result: booted}, ""},
		// A soft lockup reports a BUG but does not end the guest: the hang
		// may be our programs' (a raw tracepoint on sys_enter locked 5.10).
		{"soft lockup in a suite", &bootResult{TimedOut: true, Result: protocol.Result{BootSeconds: 4, Doctor: []byte(`{}`),
			Runs: booted.Runs, Panic: "BUG: soft lockup - CPU#0 stuck for 22s!", PanicReport: []string{"BUG: soft lockup - CPU#0 stuck for 22s!"}}}, ""},
		{"init failed", &bootResult{Result: protocol.Result{Failures: []string{"loading veth: ENOENT"}}}, ""},
		{"passed", &bootResult{Result: protocol.Result{BootSeconds: 4, Done: true}}, ""},
	} {
		if got := infrastructureFault(tc.r, time.Minute); got != tc.fault {
			t.Errorf("%s: fault %q, want %q", tc.name, got, tc.fault)
		}
	}
}

func TestBootRetryingRepeatsOnlyInfrastructureFaults(t *testing.T) {
	int3 := guestDied(t, "int3-in-suite-sid.log")
	failed := guestDied(t, "fail-then-int3.log")
	passed := &bootResult{Result: protocol.Result{BootSeconds: 4, Done: true}}
	for _, tc := range []struct {
		name    string
		retries int
		boots   []*bootResult // what each boot gives
		want    int           // boots made
	}{
		{"fault then pass", 1, []*bootResult{int3, passed}, 2},
		{"fault twice, one retry", 1, []*bootResult{int3, int3, passed}, 2},
		{"fault twice, two retries", 2, []*bootResult{int3, int3, passed}, 3},
		{"retries off", 0, []*bootResult{int3, passed}, 1},
		{"test failure", 3, []*bootResult{failed, passed}, 1},
		{"pass", 1, []*bootResult{passed, passed}, 1},
	} {
		var booted, announced int
		res, retried, err := bootRetrying(config{retries: tc.retries, kernelTimeout: time.Minute},
			func(n int) (*bootResult, error) {
				booted++
				if n != booted {
					t.Errorf("%s: boot %d numbered %d", tc.name, booted, n)
				}
				return tc.boots[n-1], nil
			}, func(attempt, []*protocol.Run) error { announced++; return nil })
		if err != nil || booted != tc.want || res != tc.boots[tc.want-1] || len(retried) != tc.want-1 || announced != tc.want-1 {
			t.Errorf("%s: booted %d times (want %d), announced %d, retried %d, err %v", tc.name, booted, tc.want, announced, len(retried), err)
		}
		for _, a := range retried {
			if a.res != int3 || !strings.HasPrefix(a.fault, "stray int3 trap") {
				t.Errorf("%s: retried %+v", tc.name, a)
			}
		}
	}
}

// A boot again runs only what the dead guest had not finished, and the
// result holds the finished runs of every boot, once.
func TestBootRetryingResumes(t *testing.T) {
	oops := guestDied(t, "oops-outside-bpf-6.1.log")
	rest := &bootResult{Result: protocol.Result{BootSeconds: 4, Done: true,
		Runs: []*protocol.Run{{Suite: "cmd/stacktop", Backend: "auto", Ended: true}}}}
	var told [][]*protocol.Run
	res, retried, err := bootRetrying(config{retries: 1, kernelTimeout: time.Minute},
		func(n int) (*bootResult, error) { return []*bootResult{oops, rest}[n-1], nil },
		func(_ attempt, finished []*protocol.Run) error { told = append(told, finished); return nil })
	if err != nil || len(retried) != 1 {
		t.Fatalf("retried %d, err %v", len(retried), err)
	}
	if len(told) != 1 || len(told[0]) != 1 || told[0][0].Suite != "internal/cgroup" {
		t.Errorf("finished runs passed to the retry: %+v, want internal/cgroup's alone", told)
	}
	var got []string
	for _, r := range res.Runs {
		got = append(got, r.Suite+"/"+r.Backend)
	}
	if want := []string{"internal/cgroup/auto", "cmd/stacktop/auto"}; !slices.Equal(got, want) {
		t.Errorf("result runs %v, want %v", got, want)
	}
	if len(res.problems(time.Minute)) != 0 {
		t.Errorf("resumed result has problems: %v", res.problems(time.Minute))
	}
}

func TestReportShowsEveryAttempt(t *testing.T) {
	int3 := guestDied(t, "int3-in-suite-sid.log")
	int3.Log = "/tmp/w/console-sid.log"
	passed := &bootResult{Wall: 90 * time.Second, Log: "/tmp/w/console-sid-attempt2.log",
		Result: protocol.Result{BootSeconds: 7, Done: true}}
	fault := infrastructureFault(int3, time.Minute)
	var b strings.Builder
	ok := report(&b, config{retries: 1}, []outcome{{kernel: debian.Kernel{Name: "sid"}, img: &debian.Image{Release: "7.2.13"},
		res: passed, retried: []attempt{{res: int3, fault: fault}}}})
	want := "PASS kernel sid (7.2.13, 0.0 MB of packages): booted in 7.0s, guest ran 1m30s (attempt 2)\n" +
		"  attempt 1: infrastructure fault after 30s, booted again: " + fault + "\n" +
		"    console log: /tmp/w/console-sid.log\n"
	if !ok || b.String() != want {
		t.Errorf("ok %v, report:\n%s\nwant:\n%s", ok, b.String(), want)
	}

	b.Reset()
	if report(&b, config{retries: 0}, []outcome{{kernel: debian.Kernel{Name: "sid"}, img: &debian.Image{Release: "7.2.13"}, res: int3}}) {
		t.Error("a guest that died passed")
	}
	if line := "  infrastructure fault, no retry left (-retries 0): " + fault + "\n"; !strings.Contains(b.String(), line) {
		t.Errorf("report lacks %q:\n%s", line, b.String())
	}
}
