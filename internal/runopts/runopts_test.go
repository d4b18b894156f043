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
	var s Seconds
	if err := s.Set("soon"); err == nil {
		t.Fatal("Set(soon) accepted")
	}
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
		`--interval "0s"`:  {"-r", "0"},
		`--interval "-1s"`: {"--interval", "-1s"},
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
	o, _ := parse(t, "-r", "1ms", "--count", "3")
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
