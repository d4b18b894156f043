// SPDX-License-Identifier: Apache-2.0

// Package runopts holds the options every reporting command shares (refresh
// interval, --count, --duration, --format) and the loop that honours them
// together with SIGINT, SIGTERM and SIGHUP.
package runopts

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/clierr"
)

// Seconds is a duration flag that also accepts a bare number of seconds, as
// netstacklat's -r does ("-r 5" and "-r 500ms" both work), bounded as
// netstacklat bounds it.
type Seconds time.Duration

// The bounds of an interval: below 10 ms the reports are noise (and cost),
// above a day nobody waits for them.
const (
	MinInterval = 10 * time.Millisecond
	MaxInterval = 24 * time.Hour
)

func (s *Seconds) String() string { return time.Duration(*s).String() }
func (s *Seconds) Type() string   { return "duration" }

// Set parses "5", "0.5" or any Go duration ("250ms", "1m") within the bounds.
func (s *Seconds) Set(v string) error {
	var d time.Duration
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		// Checked as a float: NaN, Inf and 1e20 would not survive the
		// conversion to a Duration.
		if !(f >= MinInterval.Seconds() && f <= MaxInterval.Seconds()) {
			return errInterval
		}
		d = time.Duration(f * float64(time.Second))
	} else if d, err = time.ParseDuration(v); err != nil {
		return fmt.Errorf("not a number of seconds or a duration like 500ms")
	}
	if err := checkInterval(time.Duration(d)); err != nil {
		return err
	}
	*s = Seconds(d)
	return nil
}

var errInterval = fmt.Errorf("must be from %g to %g seconds (%v to %v)", MinInterval.Seconds(), MaxInterval.Seconds(), MinInterval, MaxInterval)

func checkInterval(d time.Duration) error {
	if d < MinInterval || d > MaxInterval {
		return errInterval
	}
	return nil
}

// Options are the shared reporting options.
type Options struct {
	Interval Seconds
	Count    int
	Duration time.Duration
	Format   string
	formats  []string
}

// Register adds the shared flags to fs. intervalShort is the one-letter
// alias of --interval ("r" for netstacklat compatibility, "" for none);
// formats lists the accepted --format values, the first being the default.
func (o *Options) Register(fs *pflag.FlagSet, intervalShort string, def time.Duration, formats ...string) {
	o.Interval = Seconds(def)
	o.formats = formats
	fs.VarP(&o.Interval, "interval", intervalShort, "refresh/report interval (seconds or a duration such as 500ms)")
	fs.IntVar(&o.Count, "count", 0, "exit after this many reports (0 = run until interrupted)")
	fs.DurationVar(&o.Duration, "duration", 0, "exit after this long, e.g. 30s (0 = run until interrupted)")
	fs.StringVar(&o.Format, "format", formats[0], "output format: "+strings.Join(formats, ", "))
}

// Validate checks the values; errors name the flag and value (exit 2).
func (o *Options) Validate() error {
	if err := checkInterval(time.Duration(o.Interval)); err != nil {
		return clierr.Usage("interval", o.Interval.String(), "%v", err)
	}
	if o.Count < 0 {
		return clierr.Usage("count", strconv.Itoa(o.Count), "must not be negative")
	}
	if o.Duration < 0 {
		return clierr.Usage("duration", o.Duration.String(), "must not be negative")
	}
	if !slices.Contains(o.formats, o.Format) {
		return clierr.Usage("format", o.Format, "must be one of %s", strings.Join(o.formats, ", "))
	}
	return nil
}

// SignalContext is cancelled by SIGINT, SIGTERM or SIGHUP, so every command
// can print its final report and detach before exiting.
func SignalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
}

// Loop calls report every interval until --count reports were made, --duration
// elapsed or ctx is cancelled. The last call has final set; when the loop ends
// early (signal, duration) that last call is an extra report of what was
// collected since the previous one.
func (o *Options) Loop(ctx context.Context, report func(final bool) error) error {
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	t := time.NewTicker(time.Duration(o.Interval))
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return report(true)
		case <-t.C:
			last := o.Count > 0 && n >= o.Count
			if err := report(last); err != nil || last {
				return err
			}
		}
	}
}
