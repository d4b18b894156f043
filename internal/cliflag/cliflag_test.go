// SPDX-License-Identifier: Apache-2.0

package cliflag

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

var interval = Range{Min: 10 * time.Millisecond, Max: 24 * time.Hour}

func TestDurationAcceptsSecondsAndDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{"5": 5 * time.Second, "0.25": 250 * time.Millisecond,
		"500ms": 500 * time.Millisecond, "2m": 2 * time.Minute, "0.01": 10 * time.Millisecond, "86400": 24 * time.Hour, "24h": 24 * time.Hour} {
		var d time.Duration
		if err := (&Duration{&d, interval}).Set(in); err != nil || d != want {
			t.Errorf("Set(%q) = %v, %v; want %v", in, d, err, want)
		}
	}
	for _, in := range []string{"soon", "", "0", "-1", "0.001", "9ms", "86401", "25h", "NaN", "Inf", "-Inf", "99999999999999999999", "1e300", "-2562047h"} {
		d := time.Duration(-42)
		if err := (&Duration{&d, interval}).Set(in); err == nil || d != -42 {
			t.Errorf("Set(%q) accepted: %v", in, d)
		}
	}
}

func TestDurationOffAcceptsZero(t *testing.T) {
	d := time.Minute
	r := Range{Min: time.Second, Max: time.Hour, Off: "never"}
	if err := (&Duration{&d, r}).Set("0"); err != nil || d != 0 {
		t.Fatalf("Set(0) = %v, %v", d, err)
	}
	err := (&Duration{&d, r}).Set("0.5")
	if err == nil || err.Error() != "must be 0 (never) or from 1 to 3600 seconds (1s to 1h0m0s)" {
		t.Fatalf("Set(0.5): %v", err)
	}
}

// FuzzDuration: any text is either refused or gives a duration within the
// bounds; nothing panics.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"5", "0.5", "500ms", "NaN", "1e20", "-2562047h47m16.854775808s", "0x10", "1_000", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var d time.Duration
		if err := (&Duration{&d, interval}).Set(v); err == nil && (d < interval.Min || d > interval.Max) {
			t.Fatalf("Set(%q) accepted %v", v, d)
		}
	})
}

func TestIntBounds(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var n int
	IntVarP(fs, &n, "sample", "", 1, 1, 1000, "record 1 in N")
	for _, bad := range []string{"0", "1001", "-1", "1e3", "0x10", "ten", ""} {
		err := fs.Parse([]string{"--sample", bad})
		want := `invalid argument "` + bad + `" for "--sample" flag: must be a whole number from 1 to 1000`
		if err == nil || err.Error() != want {
			t.Errorf("--sample %q: %v, want %s", bad, err, want)
		}
	}
	if err := fs.Parse([]string{"--sample", "1000"}); err != nil || n != 1000 {
		t.Fatalf("--sample 1000: %d, %v", n, err)
	}
	if got := fs.Lookup("sample").Value.Type(); got != "int" {
		t.Errorf("help shows %s, want int", got)
	}
}

// An alias sets the flag it names, which alone is shown in help; the
// normalisation set before keeps working.
func TestAliases(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	var a, b int
	fs.IntVar(&a, "connections.max-series", 0, "")
	fs.IntVar(&b, "interval", 0, "")
	Aliases(fs, map[string]string{"report-interval": "interval"})
	Aliases(fs, map[string]string{"max-series": "connections.max-series"})
	if err := fs.Parse([]string{"--max-series", "3", "--report-interval", "4"}); err != nil {
		t.Fatal(err)
	}
	if a != 3 || b != 4 || !fs.Changed("connections.max-series") {
		t.Fatalf("a=%d b=%d changed=%v", a, b, fs.Changed("connections.max-series"))
	}
	if usage := fs.FlagUsages(); strings.Contains(usage, "--max-series") || strings.Contains(usage, "report-interval") {
		t.Errorf("help shows an alias:\n%s", usage)
	}
}

// FuzzInt: any text is either refused, leaving the value alone, or gives a
// number within the bounds.
func FuzzInt(f *testing.F) {
	for _, s := range []string{"1", "1000", "0", "-1", "+5", "1e3", "0x10", "99999999999999999999", " 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n := -42
		err := (&Int{&n, 1, 1000}).Set(v)
		if (err == nil && (n < 1 || n > 1000)) || (err != nil && n != -42) {
			t.Fatalf("Set(%q) = %d, %v", v, n, err)
		}
	})
}
