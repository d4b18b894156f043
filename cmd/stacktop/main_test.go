// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
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
		{[]string{"stacktop", "help", "bogus"}, `unknown help topic "bogus"`},
		{[]string{"stacktop", "help", "latency", "bogus"}, `unknown help topic "latency bogus"`},
		{[]string{"stacktop", "completion", "bogus"}, `unknown command "bogus" for "stacktop completion"`},
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
	for _, name := range []string{"btf", "fentry", "tp_btf", "netfilter_link", "ringbuf", "sk_storage", "tcp-socket-read clock:"} {
		if !strings.Contains(out, "\n"+name+" ") {
			t.Errorf("doctor output lacks %s:\n%s", name, out)
		}
	}
	// Loopback stamps nothing in hardware and has no PHC, on every kernel.
	if !regexp.MustCompile(`\nINTERFACE +RX HW STAMPS +FILTER +PHC +NOTE\n(.*\n)*lo +no +- +- +the driver does not stamp`).MatchString(out) {
		t.Errorf("doctor output lacks the interfaces' hardware stamping, with lo's:\n%s", out)
	}
	// Root on the kernels we support: every command runs, whatever
	// backends were refused on the way.
	for _, command := range []string{"top/stream", "latency", "serve"} {
		if !regexp.MustCompile(`(?m)^` + command + ` +runs \([a-z, ]+\)`).MatchString(out) {
			t.Errorf("doctor's verdict does not say %s runs:\n%s", command, out)
		}
	}
}

// --version on every name, and the help of an alias says the name it was
// invoked as (it said "Usage: stacktop latency").
func TestVersionFlagAndAliasUsage(t *testing.T) {
	for _, prog := range []string{"stacktop", "tcptop", "netstacklat"} {
		code, out, stderr := runArgs(prog, "--version")
		if want := "stacktop " + version + "\ncommit "; code != 0 || !strings.HasPrefix(out, want) {
			t.Errorf("%s --version: exit %d, %q %q; want %q", prog, code, out, stderr, want)
		}
	}
	for prog, want := range map[string]string{"netstacklat": "Usage:\n  netstacklat [flags]\n", "tcptop": "Usage:\n  tcptop [interval] [count] [flags]\n",
		"stacktop": "Usage:\n  stacktop [flags]\n  stacktop [command]\n"} {
		code, out, _ := runArgs(prog, "--help")
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("%s --help: exit %d, lacks %q:\n%s", prog, code, want, out)
		}
	}
	if code, _, stderr := runArgs("netstacklat", "-r", "0"); code != clierr.ExitUsage || !strings.Contains(stderr, "Run 'netstacklat --help' for usage.") {
		t.Errorf("netstacklat -r 0: exit %d, %q", code, stderr)
	}
}
