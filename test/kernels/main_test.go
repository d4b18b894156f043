// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/test/kernels/debian"
	"github.com/stacktop/stacktop/test/kernels/protocol"
)

func TestIntegrationSuitesAreThePackagesUsingTestenv(t *testing.T) {
	list := strings.Join([]string{
		"github.com/stacktop/stacktop/cmd/stacktop|github.com/stacktop/stacktop/internal/testenv,os/exec|",
		"github.com/stacktop/stacktop/internal/hist||",
		"github.com/stacktop/stacktop/internal/latency||github.com/stacktop/stacktop/internal/testenv",
		"github.com/stacktop/stacktop/internal/testenv|net,testing|",
		"github.com/stacktop/stacktop/test/kernels/debian|github.com/stacktop/stacktop/internal/testenv|",
	}, "\n")
	got := integrationSuites(list)
	want := []string{
		"github.com/stacktop/stacktop/cmd/stacktop",
		"github.com/stacktop/stacktop/internal/latency",
		"github.com/stacktop/stacktop/internal/testenv",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("suites %v, want %v", got, want)
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-kernel", "6.1,trixie", "-backends", "fentry"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.kernels) != 2 || cfg.kernels[0].Name != "6.1" || cfg.kernels[1].Name != "6.12" {
		t.Errorf("kernels %+v", cfg.kernels)
	}
	if !reflect.DeepEqual(cfg.backends, []string{"fentry"}) || !reflect.DeepEqual(cfg.modules, []string{"veth", "tun", "sch_tbf", "sch_netem", "tcp_diag", "udp_diag"}) {
		t.Errorf("backends %v modules %v", cfg.backends, cfg.modules)
	}
	if cfg, err := parseFlags(nil); err != nil || len(cfg.kernels) != 4 || len(cfg.backends) != 3 || cfg.retries != 1 || cfg.count != 1 || cfg.cpus != 2 {
		t.Errorf("defaults: %+v %v", cfg, err)
	}
	for _, args := range [][]string{
		{"-kernel", "4.19"},
		{"-backends", "kprobe"},
		{"-backends", ","},
		{"-parallel", "0"},
		{"-retries", "-1"},
		{"-count", "0"},
		{"-cpus", "0"},
		{"-timeout", "1m", "-suite-timeout", "2m"},
		{"extra"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		} else if !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "-")) {
			t.Errorf("parseFlags(%q): %v does not name the flag", args, err)
		}
	}
}

func TestProblemsNameWhatWentWrong(t *testing.T) {
	hung := &bootResult{TimedOut: true, Result: protocol.Result{
		BootSeconds: 3, Doctor: []byte(`{}`),
		Runs: []*protocol.Run{{Suite: "example/pkg", Backend: "fentry"}},
	}}
	if p := hung.problems(10 * time.Minute); len(p) != 1 || p[0] != "guest hung: killed after 10m0s while example/pkg ran with backend fentry" {
		t.Errorf("hung: %q", p)
	}
	for want, r := range map[string]protocol.Result{
		"guest hung: killed after 1m0s before init started (kernel boot)": {},
		"guest hung: killed after 1m0s while stacktop doctor ran":         {BootSeconds: 3},
		"guest hung: killed after 1m0s after the last step it reported":   {BootSeconds: 3, Doctor: []byte(`{}`)},
	} {
		if p := (&bootResult{TimedOut: true, Result: r}).problems(time.Minute); len(p) != 1 || p[0] != want {
			t.Errorf("hung: %q, want %q", p, want)
		}
	}
	panicked := &bootResult{Result: protocol.Result{Panic: "Kernel panic - not syncing: Attempted to kill init!"}}
	if p := panicked.problems(time.Minute); len(p) != 1 || !strings.Contains(p[0], "Attempted to kill init") {
		t.Errorf("panic: %q", p)
	}
	failed := &bootResult{Result: protocol.Result{Done: true, Runs: []*protocol.Run{{Suite: "example/pkg", Backend: "auto",
		Ended: true, ExitCode: 1, Tests: []protocol.Test{{Name: "TestA", Status: protocol.Fail}}}}}}
	want := []string{"example/pkg [auto] TestA failed", "example/pkg [auto] exited 1"}
	if p := failed.problems(time.Minute); !reflect.DeepEqual(p, want) {
		t.Errorf("failed: %q", p)
	}
	stopped := &bootResult{Result: protocol.Result{}}
	if p := stopped.problems(time.Minute); len(p) != 1 || !strings.Contains(p[0], "before finishing") {
		t.Errorf("stopped: %q", p)
	}
	if p := (&bootResult{Result: protocol.Result{Done: true}}).problems(time.Minute); len(p) != 0 {
		t.Errorf("clean run: %q", p)
	}
}

func TestReportListsHostOnlySkipsApart(t *testing.T) {
	run := &protocol.Run{Suite: "deploy", Backend: "auto", Ended: true, Seconds: 0.2, Tests: []protocol.Test{
		{Name: "TestA", Status: protocol.Pass},
		{Name: "TestB", Status: protocol.Skip, Messages: []string{"b_test.go:3: not in the guest image: promtool (host-only tool)"}},
		{Name: "TestC", Status: protocol.Skip, Messages: []string{"c_test.go:4: unsupported: no netfilter link"}},
		{Name: "TestD", Status: protocol.Skip, Messages: []string{"d_test.go:5: slow"}},
	}}
	if got, want := summarize(run), "1 passed, 0 failed, 3 skipped (1 not in the guest image), exit 0 in 0.2s"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	var b strings.Builder
	report(&b, config{}, []outcome{{kernel: debian.Kernel{Name: "6.12"}, img: &debian.Image{Release: "6.12.0"},
		res: &bootResult{Result: protocol.Result{Done: true, Runs: []*protocol.Run{run}}}}})
	for _, line := range []string{
		"    TestB not in the guest image: promtool (host-only tool)\n",
		"    TestC unsupported: no netfilter link\n",
		"    TestD skipped: d_test.go:5: slow\n",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, b.String())
		}
	}
}

func TestReportEndsWithWhatFailed(t *testing.T) {
	var logs []string
	for i := range 40 {
		logs = append(logs, fmt.Sprintf("x_test.go:%d: line %d", i, i))
	}
	run := &protocol.Run{Suite: "internal/conntrack", Backend: "fentry", Ended: true, ExitCode: 1, Tests: []protocol.Test{
		{Name: "TestA", Status: protocol.Pass},
		{Name: "TestB", Status: protocol.Fail, Messages: logs},
	}}
	var b strings.Builder
	ok := report(&b, config{}, []outcome{
		{kernel: debian.Kernel{Name: "sid"}, img: &debian.Image{Release: "7.2.13"},
			res: &bootResult{Log: "/nonexistent", Result: protocol.Result{Done: true, Runs: []*protocol.Run{run}}}},
		{kernel: debian.Kernel{Name: "6.1"}, err: errors.New("no such package")},
	})
	if ok {
		t.Error("report passed a failed test")
	}
	out := b.String()
	_, last, found := strings.Cut(out, "FAILED kernel sid (7.2.13):\n")
	if !found {
		t.Fatalf("no failure section at the end:\n%s", out)
	}
	want := "  problem: internal/conntrack [fentry] TestB failed\n" +
		"  problem: internal/conntrack [fentry] exited 1\n" +
		"  --- internal/conntrack [fentry] TestB:\n" +
		"    (10 earlier lines in the console log)\n" +
		"    x_test.go:10: line 10\n"
	if !strings.HasPrefix(last, want) {
		t.Errorf("failure section starts\n%s\nwant\n%s", last, want)
	}
	if !strings.HasSuffix(out, "    x_test.go:39: line 39\nFAILED kernel 6.1: no such package\n") {
		t.Errorf("output does not end with the failures:\n%s", out)
	}
}

func TestGuestGetsThePackagesDataFiles(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.go", "a_test.go", "grafana/dash.json", "testdata/x.go", "testdata/y.txt", "sub/pkg.go", "sub/data.txt"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	keep := dataFile(dir)
	var got []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if !keep(rel, d) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() {
			got = append(got, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// testdata is copied whole (Go files there are data); sub is a package
	// of its own.
	if want := []string{"grafana/dash.json", "testdata/x.go", "testdata/y.txt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("copied %q, want %q", got, want)
	}
}
