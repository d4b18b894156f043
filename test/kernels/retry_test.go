// SPDX-License-Identifier: Apache-2.0

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
		// So is one in the kernel's BPF iterator code while we read an
		// iterator (7.2's socket storage iterator under churn;
		// captured from the matrix, cut after the panic): never retried.
		{"oops-in-bpf-iterator-sid.log", ""},
		// One far from any of our programs (AppArmor's recvmsg hook, a
		// socket without its sk_security; captured in CI, a program of ours
		// only among the unwinder's guesses) is the kernel's or the emulator's.
		{"oops-outside-bpf-6.1.log", "kernel oops outside our BPF programs: [  116.639368] BUG: kernel NULL pointer dereference, address: 0000000000000000 at RIP: 0010:aa_sk_perm+0x5f/0x200"},
		// 6.1's CPUs looping on a stale int3 at a static key: the RCU
		// stall's NMI backtrace has CPU 0 in the int3 entry, trapped at a
		// byte that is not an int3 (captured in CI; the stall report and
		// the markers, what the runner reads before it stops the guest).
		{"int3-loop-6.1.log", "a vCPU looping on a stray int3 of the kernel's live code patching under TCG: " +
			"CPU 0 trapped on an int3 at sk_filter_trim_cap+0x36, where memory holds a static key's 2-byte nop (66 90) " +
			"([  662.027837] rcu: INFO: rcu_preempt self-detected stall on CPU)"},
		// The same caught in the common exception entry (error_entry), the
		// int3 entry named by the unwinder (captured likewise, no iterator).
		{"lockup-error-entry-6.1.log", "a vCPU looping on a stray int3 of the kernel's live code patching under TCG: " +
			"CPU 0 trapped on an int3 at sk_filter_trim_cap+0x36, where memory holds a static key's short jump (eb 3c) " +
			"([  368.734499] rcu: INFO: rcu_preempt self-detected stall on CPU)"},
		// The same loop caught between two int3s: CPU 0 at a static key's
		// jump in inet_create in a soft lockup and an RCU stall report
		// (captured on 6.1 with TestStartupUnderChurn alone, cut likewise).
		{"lockup-jump-site-6.1.log", "a vCPU looping on a stray int3 of the kernel's live code patching under TCG: " +
			"CPU 0 stuck at inet_create+0x259/0x380, a static key's short jump (eb 02), at 180.325975s and 181.697503s " +
			"([  180.325975] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [._internal_conn:101])"},
		// 5.10, with the accept tracepoints and TCP iterators it refuses
		// before 5.15 off: CPU 0 at the same static key, a K8 5-byte nop
		// there, in an RCU stall and a soft lockup (captured from another
		// engineer's run of main; cut after the soft lockup report).
		{"lockup-nop5-5.10.log", "a vCPU looping on a stray int3 of the kernel's live code patching under TCG: " +
			"CPU 0 stuck at sk_filter_trim_cap+0x36/0x210, a static key's 5-byte nop (66 66 66 66 90), at 140.100375s and 164.591437s " +
			"([  140.100375] rcu: INFO: rcu_sched self-detected stall on CPU)"},
		// Both CPUs at one static key's jump in sk_filter_trim_cap: the RCU
		// stall dumps CPU 1 twice at the same instant (one sample), the soft
		// lockup 6.5 s later CPU 0 (captured likewise, with an owners
		// iterator; cut after the soft lockup report).
		{"lockup-two-cpus-6.1.log", "a vCPU looping on a stray int3 of the kernel's live code patching under TCG: " +
			"CPUs 1 and 0 stuck at sk_filter_trim_cap+0x36/0x250, a static key's short jump (eb 3c), at 217.851381s and 224.349495s " +
			"([  217.851381] rcu: INFO: rcu_preempt self-detected stall on CPU)"},
		// A test failed before the emulator fault: a failure stays a failure.
		{"fail-then-int3.log", ""},
	} {
		if got := infrastructureFault(guestDied(t, tc.log), time.Minute); got != tc.fault {
			t.Errorf("%s: fault %q, want %q", tc.log, got, tc.fault)
		}
	}
}

// consoleEdited is a captured console with one line changed: a lockup
// the emulator did not cause, built from one it did.
func consoleEdited(t *testing.T, name string, edit func(lines []string) []string) *bootResult {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "console", name))
	if err != nil {
		t.Fatal(err)
	}
	var c protocol.Collector
	for _, l := range edit(strings.Split(string(b), "\n")) {
		c.Line(l)
	}
	return &bootResult{Result: c.Result, Wall: 30 * time.Second, Log: name}
}

// replaceIn changes the first line containing old to new.
func replaceIn(t *testing.T, old, new string) func([]string) []string {
	return func(lines []string) []string {
		for i, l := range lines {
			if strings.Contains(l, old) {
				lines[i] = strings.Replace(l, old, new, 1)
				return lines
			}
		}
		t.Fatalf("no line with %q", old)
		return nil
	}
}

// A lockup is an emulator fault only on the evidence of the int3 loop, and
// never with one of our programs on a reported CPU's path.
func TestLockupsTheEmulatorDidNotCause(t *testing.T) {
	const jump, int3 = "lockup-jump-site-6.1.log", "int3-loop-6.1.log"
	for _, tc := range []struct {
		name string
		r    *bootResult
	}{
		// One of our programs under the stuck CPU, as the unwinder is sure.
		{"our program on the path", consoleEdited(t, jump, replaceIn(t, "  __sock_create+0x10a/0x1c0",
			"  bpf_prog_6deef7357e7b4530_conns_sock_create+0x2c/0x44"))},
		// Our program under the stuck CPU, while the report also names
		// the int3 machinery (here an unwinder's guess).
		{"our program, text_poke named", consoleEdited(t, jump, func(lines []string) []string {
			lines = replaceIn(t, "  __sock_create+0x10a/0x1c0", "  bpf_prog_6deef7357e7b4530_conns_sock_create+0x2c/0x44")(lines)
			return replaceIn(t, "  ? do_epoll_ctl+0x1bd/0xf50", "  ? poke_int3_handler+0x1bd/0xf50")(lines)
		})},
		// Stuck twice in a loop (pause; jmp back), not at a static key.
		{"a spinning CPU", consoleEdited(t, jump, func(lines []string) []string {
			both := replaceIn(t, "<eb> 02 eb ce", "<f3> 90 eb fc")
			return both(both(lines))
		})},
		// At a static key's jump once: a CPU interrupted there by chance.
		{"one report at a jump site", consoleEdited(t, jump, func(lines []string) []string {
			i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "rcu: INFO:") })
			return lines[:i]
		})},
		// One dump, printed twice at the same instant by one report.
		{"one sample, dumped twice", consoleEdited(t, "lockup-two-cpus-6.1.log", func(lines []string) []string {
			i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "soft lockup") })
			return lines[:i]
		})},
		// The int3 that trapped is in memory: a real breakpoint, not a stale
		// one (the other CPU's single dump at the nop is not enough either).
		{"an int3 that is there", consoleEdited(t, int3, replaceIn(t, "00 00 66 <90> 48 89 de", "00 00 cc <90> 48 89 de"))},
	} {
		if got := infrastructureFault(tc.r, time.Minute); got != "" {
			t.Errorf("%s: fault %q, want none", tc.name, got)
		}
		if tc.r.Stall == nil || len(tc.r.Stall.CPUs) == 0 {
			t.Errorf("%s: no stall report read", tc.name)
		}
	}
	// The failure says where each CPU was, and which program of ours.
	var b strings.Builder
	stallEvidence(&b, consoleEdited(t, jump, replaceIn(t, "  __sock_create+0x10a/0x1c0",
		"  bpf_prog_6deef7357e7b4530_conns_sock_create+0x2c/0x44")).Stall)
	want := "  2 stall report(s), the first: [  180.325975] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [._internal_conn:101]\n" +
		"    CPU 0 at 180.325975s: inet_create+0x259/0x380, code eb 02 eb ce be; our program on its path: " +
		"[  180.325975]  bpf_prog_6deef7357e7b4530_conns_sock_create+0x2c/0x44\n" +
		"    CPU 0 at 181.697503s: inet_create+0x259/0x380, code eb 02 eb ce be\n"
	if b.String() != want {
		t.Errorf("evidence:\n%s\nwant:\n%s", b.String(), want)
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
