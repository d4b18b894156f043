// SPDX-License-Identifier: Apache-2.0

package runopts

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/clierr"
)

func TestSecondsAcceptsNumbersAndDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{"5": 5 * time.Second, "0.25": 250 * time.Millisecond,
		"500ms": 500 * time.Millisecond, "2m": 2 * time.Minute} {
		var s Seconds
		if err := s.Set(in); err != nil || time.Duration(s) != want {
			t.Errorf("Set(%q) = %v, %v; want %v", in, time.Duration(s), err, want)
		}
	}
	for _, in := range []string{"soon", "0", "-1", "0.001", "9ms", "86401", "25h", "NaN", "Inf", "-Inf", "99999999999999999999", "1e300", "-2562047h"} {
		var s Seconds
		if err := s.Set(in); err == nil {
			t.Errorf("Set(%q) accepted: %v", in, time.Duration(s))
		}
	}
	for _, in := range []string{"0.01", "10ms", "86400", "24h"} {
		var s Seconds
		if err := s.Set(in); err != nil {
			t.Errorf("Set(%q) = %v, want the bound accepted", in, err)
		}
	}
}

// FuzzSeconds: any text is either refused or gives an interval within the
// bounds; nothing panics.
func FuzzSeconds(f *testing.F) {
	for _, s := range []string{"5", "0.5", "500ms", "NaN", "1e20", "-2562047h47m16.854775808s", "0x10", "1_000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var s Seconds
		if err := s.Set(v); err == nil && (time.Duration(s) < MinInterval || time.Duration(s) > MaxInterval) {
			t.Fatalf("Set(%q) accepted %v", v, time.Duration(s))
		}
	})
}

func parse(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	var o Options
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	o.Register(fs, "r", time.Second, "text", "json")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &o, o.Validate()
}

func TestValidateNamesFlagAndValue(t *testing.T) {
	cases := map[string][]string{
		`--count "-2"`:     {"--count", "-2"},
		`--duration "-5s"`: {"--duration", "-5s"},
		`--format "yaml"`:  {"--format", "yaml"},
	}
	for want, args := range cases {
		_, err := parse(t, args...)
		if clierr.Code(err) != clierr.ExitUsage || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want exit 2 naming %s", args, err, want)
		}
	}
	if o, err := parse(t, "-r", "0.01", "--format", "json"); err != nil || o.Format != "json" {
		t.Fatalf("valid flags rejected: %v", err)
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
