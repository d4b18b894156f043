package main

import (
	"bytes"
	"context"
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
		{[]string{"stacktop", "--log-level", "loud", "version"}, `invalid --log-level "loud"`},
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
