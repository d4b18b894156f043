package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/testenv"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrorsExit2NamingTheProblem(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"stacktop", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"stacktop", "doctor", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"stacktop", "doctor", "--format", "yaml"}, `invalid --format "yaml"`},
		{[]string{"stacktop", "--log-level", "loud", "version"}, `invalid --log.level "loud"`},
		{[]string{"stacktop", "--log.level", "loud", "version"}, `invalid --log.level "loud"`},
		{[]string{"stacktop", "--log.format", "xml", "version"}, `invalid --log.format "xml": must be logfmt or json`},
		{[]string{"stacktop", "version", "extra"}, `unknown command "extra"`},
	}
	for _, c := range cases {
		code, _, stderr := runArgs(c.args...)
		if code != clierr.ExitUsage || !strings.Contains(stderr, c.want) || !strings.HasPrefix(stderr, "error: ") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runArgs("stacktop", "version")
	if code != 0 || !strings.HasPrefix(out, "stacktop ") || !strings.Contains(out, "kernel ") {
		t.Fatalf("exit %d, output %q", code, out)
	}
}

// --version, as every Prometheus exporter has it, on the root and on serve.
func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"stacktop", "--version"}, {"stacktop", "serve", "--version"}} {
		code, out, _ := runArgs(args...)
		if code != 0 || out != versionText() || !strings.HasPrefix(out, "stacktop "+version+"\ncommit ") {
			t.Errorf("%v: exit %d, output %q", args, code, out)
		}
	}
}

func TestDoctorReportsEveryProbe(t *testing.T) {
	testenv.RequireRoot(t)
	code, out, stderr := runArgs("stacktop", "doctor")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, name := range []string{"btf", "fentry", "tp_btf", "netfilter_link", "ringbuf", "sk_storage"} {
		if !strings.Contains(out, "\n"+name+" ") {
			t.Errorf("doctor output lacks %s:\n%s", name, out)
		}
	}
}

// TestWithoutPrivilegesExit77 runs the real binary as nobody: it must refuse
// with the contract's one-line message before touching the kernel.
func TestWithoutPrivilegesExit77(t *testing.T) {
	testenv.RequireRoot(t)
	cmd := exec.Command(testenv.Binary(t), "doctor")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != clierr.ExitPrivileges {
		t.Fatalf("as nobody: %v, stderr %q; want exit 77", err, stderr.String())
	}
	want := "error: stacktop requires root privileges (or CAP_BPF and CAP_PERFMON). Run with sudo.\n"
	if stderr.String() != want {
		t.Fatalf("stderr %q, want %q", stderr.String(), want)
	}
}
