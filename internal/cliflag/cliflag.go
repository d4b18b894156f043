// SPDX-License-Identifier: Apache-2.0

// Package cliflag holds the flag vocabulary every command shares: value
// types validated as they are set (a duration that also takes bare seconds,
// a bounded whole number), so that a bad value is refused with the flag's
// name and the value (exit 2) and help shows the type; the enumerations
// shell completion offers; and old spellings kept as hidden aliases.
package cliflag

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Range bounds a Duration flag. Off, when set, says what 0 means ("until
// interrupted", "none"): 0 is then accepted besides [Min, Max].
type Range struct {
	Min, Max time.Duration
	Off      string
}

// Duration is a duration flag that also accepts a bare number of seconds,
// as netstacklat's -r does: "5", "0.5", "500ms" and "2m" all work.
type Duration struct {
	p *time.Duration
	r Range
}

// DurationVarP adds a Duration flag to fs (short "" for none).
func DurationVarP(fs *pflag.FlagSet, p *time.Duration, name, short string, def time.Duration, r Range, usage string) {
	*p = def
	fs.VarP(&Duration{p, r}, name, short, usage)
}

func (d *Duration) String() string { return d.p.String() }
func (d *Duration) Type() string   { return "duration" }

// Set parses v and checks it against the range.
func (d *Duration) Set(v string) error {
	got, err := ParseSeconds(v)
	if errors.Is(err, errOutOfRange) {
		return d.r.err()
	}
	if err != nil {
		return err
	}
	if (got == 0 && d.r.Off != "") || (got >= d.r.Min && got <= d.r.Max) {
		*d.p = got
		return nil
	}
	return d.r.err()
}

func (r Range) err() error {
	bounds := fmt.Sprintf("from %g to %g seconds (%v to %v)", r.Min.Seconds(), r.Max.Seconds(), r.Min, r.Max)
	if r.Off != "" {
		return fmt.Errorf("must be 0 (%s) or %s", r.Off, bounds)
	}
	return errors.New("must be " + bounds)
}

// maxSeconds is the longest time.Duration in seconds: a number beyond it
// (or NaN, or Inf) would not survive the conversion.
const maxSeconds = float64(math.MaxInt64) / float64(time.Second)

var errOutOfRange = errors.New("out of range")

// ParseSeconds reads a bare number of seconds ("5", "0.25") or a Go
// duration ("250ms", "1m30s").
func ParseSeconds(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if !(math.Abs(f) < maxSeconds) {
			return 0, errOutOfRange
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errors.New("not a number of seconds or a duration such as 500ms")
	}
	return d, nil
}

// Int is a whole-number flag within [min, max].
type Int struct {
	p        *int
	min, max int
}

// IntVarP adds an Int flag to fs (short "" for none).
func IntVarP(fs *pflag.FlagSet, p *int, name, short string, def, min, max int, usage string) {
	*p = def
	fs.VarP(&Int{p, min, max}, name, short, usage)
}

func (n *Int) String() string { return strconv.Itoa(*n.p) }
func (n *Int) Type() string   { return "int" }

// Set parses v as a decimal whole number within the bounds.
func (n *Int) Set(v string) error {
	i, err := strconv.Atoi(v)
	if err != nil || i < n.min || i > n.max {
		return fmt.Errorf("must be a whole number from %d to %d", n.min, n.max)
	}
	*n.p = i
	return nil
}

// valuesKey is the flag annotation that lists a flag's accepted values.
const valuesKey = "stacktop_values"

// Enum records the values flag name accepts, for shell completion. A list
// flag (comma-separated) completes each element.
func Enum(fs *pflag.FlagSet, name string, values ...string) {
	if err := fs.SetAnnotation(name, valuesKey, values); err != nil {
		panic(err) // a flag name misspelt in the code
	}
}

// RegisterCompletions makes cobra's completion (`__complete`, and the
// scripts of `stacktop completion`) offer the Enum values of every flag of
// cmd and its subcommands.
func RegisterCompletions(cmd *cobra.Command) {
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags()} {
		fs.VisitAll(func(f *pflag.Flag) {
			if values, ok := f.Annotations[valuesKey]; ok {
				if err := cmd.RegisterFlagCompletionFunc(f.Name, complete(values, isList(f))); err != nil {
					panic(err) // registered twice: a programming error
				}
			}
		})
	}
	for _, sub := range cmd.Commands() {
		RegisterCompletions(sub)
	}
}

func isList(f *pflag.Flag) bool { return f.Value.Type() == "stringSlice" }

// complete offers values; for a list, after the elements already typed.
func complete(values []string, list bool) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if !list {
			return values, cobra.ShellCompDirectiveNoFileComp
		}
		done := toComplete[:strings.LastIndex(toComplete, ",")+1]
		var out []string
		for _, v := range values {
			if !strings.Contains(","+done, ","+v+",") {
				out = append(out, done+v)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
}

// Aliases keeps old spellings of flags working: each key of old is
// accepted as the flag its value names. They appear nowhere in help.
// Earlier aliases (netstacklat's names) keep working.
func Aliases(fs *pflag.FlagSet, old map[string]string) {
	prev := fs.GetNormalizeFunc()
	fs.SetNormalizeFunc(func(fs *pflag.FlagSet, name string) pflag.NormalizedName {
		if n, ok := old[name]; ok {
			name = n
		}
		return prev(fs, name)
	})
}
