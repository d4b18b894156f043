// SPDX-License-Identifier: Apache-2.0

package runopts

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/clierr"
)

// parse registers the options, parses args and validates them: a bad
// value fails either way, naming the flag and the value.
func parse(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	var o Options
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.Register(fs, "r", time.Second, "text", "json")
	if err := fs.Parse(args); err != nil {
		return &o, err
	}
	return &o, o.Validate()
}

func TestBadValuesNameFlagAndValue(t *testing.T) {
	cases := map[string][]string{
		`invalid argument "-2" for "--count" flag: must be a whole number from 0`:                   {"--count", "-2"},
		`invalid argument "-5s" for "--duration" flag: must be 0 (until interrupted) or from 0.001`: {"--duration", "-5s"},
		`invalid --format "yaml"`: {"--format", "yaml"},
	}
	for want, args := range cases {
		if _, err := parse(t, args...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want %s", args, err, want)
		}
	}
	if _, err := parse(t, "--format", "yaml"); clierr.Code(err) != clierr.ExitUsage {
		t.Errorf("--format yaml: exit %d, want 2", clierr.Code(err))
	}
	o, err := parse(t, "-r", "0.01", "--format", "json", "--duration", "90", "--count", "3")
	if err != nil || o.Format != "json" || o.Interval != 10*time.Millisecond || o.Duration != 90*time.Second || o.Count != 3 {
		t.Fatalf("valid flags: %+v, %v", o, err)
	}
}

func TestLoopStopsAfterCountWithFinalReport(t *testing.T) {
	o, _ := parse(t, "-r", "10ms", "--count", "3")
	var finals []bool
	err := o.Loop(context.Background(), func(final bool) error { finals = append(finals, final); return nil })
	if err != nil || len(finals) != 3 || finals[0] || finals[1] || !finals[2] {
		t.Fatalf("reports %v, err %v", finals, err)
	}
}

func TestLoopReportsOnceMoreWhenCancelled(t *testing.T) {
	o, _ := parse(t, "-r", "1h")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var finals []bool
	if err := o.Loop(ctx, func(final bool) error { finals = append(finals, final); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(finals) != 1 || !finals[0] {
		t.Fatalf("reports %v", finals)
	}
}
