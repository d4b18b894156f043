// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/test/kernels/debian"
)

// fakeQEMU boots "guests" that print a console and then hang, as a guest
// whose CPUs are stuck does: a script in qemu's place that prints the
// console file and sleeps.
func fakeQEMU(t *testing.T, console string) config {
	t.Helper()
	console, err := filepath.Abs(console)
	if err != nil {
		t.Fatal(err)
	}
	qemu := filepath.Join(t.TempDir(), "qemu")
	if err := os.WriteFile(qemu, []byte("#!/bin/sh\ncat '"+console+"'\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return config{qemu: qemu, memory: "1G", kernelTimeout: 2 * time.Minute}
}

func bootFake(t *testing.T, cfg config) *bootResult {
	t.Helper()
	log := filepath.Join(t.TempDir(), "console.log")
	res, err := boot(context.Background(), &debian.Image{Kernel: debian.Kernel{Name: "6.1"}}, "initrd", log, 2, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A guest whose stall reports show the emulator's int3 loop is stopped as
// soon as they are complete, not at -timeout, and its result says why; a
// stopped guest is no qemu failure.
func TestBootStopsAGuestLoopingOnAStrayInt3(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"int3-loop-6.1.log", "lockup-jump-site-6.1.log"} { // both kinds of evidence
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bootStopped(t, name)
		})
	}
}

func bootStopped(t *testing.T, name string) {
	res := bootFake(t, fakeQEMU(t, filepath.Join("testdata", "console", name)))
	want := lockupFault(res.Stall)
	if want == "" || res.Stopped != want || res.TimedOut || res.ExitErr != nil {
		t.Errorf("stopped %q (want %q), timed out %v, qemu error %v", res.Stopped, want, res.TimedOut, res.ExitErr)
	}
	if p := res.problems(time.Minute); len(p) == 0 || !strings.HasPrefix(p[0], "guest stopped while ") || !strings.HasSuffix(p[0], ": "+want) {
		t.Errorf("problems %q", p)
	}
	if fault := infrastructureFault(res, time.Minute); !strings.HasSuffix(fault, want) {
		t.Errorf("infrastructure fault %q", fault)
	}
	if log, _ := os.ReadFile(res.Log); !strings.Contains(string(log), "stacktop-matrix: stopping the guest: "+want) {
		t.Error("the console log does not say why the guest was stopped")
	}
}

// A lockup with one of our programs on the stuck CPU's path is not
// stopped early: it runs into -timeout, fails, and is not booted again.
func TestBootLetsOurLockupsRunIntoTheTimeout(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("testdata", "console", "lockup-jump-site-6.1.log"))
	if err != nil {
		t.Fatal(err)
	}
	ours := strings.Replace(string(b), "  __sock_create+0x10a/0x1c0", "  bpf_prog_6deef7357e7b4530_conns_sock_create+0x2c/0x44", 1)
	console := filepath.Join(t.TempDir(), "console")
	if err := os.WriteFile(console, []byte(ours), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fakeQEMU(t, console)
	cfg.kernelTimeout = stallQuiet + 3*time.Second // long enough to be judged
	res := bootFake(t, cfg)
	if res.Stopped != "" || !res.TimedOut {
		t.Errorf("stopped %q, timed out %v", res.Stopped, res.TimedOut)
	}
	if fault := infrastructureFault(res, cfg.kernelTimeout); fault != "" {
		t.Errorf("infrastructure fault %q", fault)
	}
}
