// SPDX-License-Identifier: Apache-2.0

// Package runopts holds the options every reporting command shares (refresh
// interval, --count, --duration, --format) and the loop that honours them
// together with SIGINT, SIGTERM and SIGHUP.
package runopts

import (
	"context"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/cliflag"
)

// IntervalRange bounds every refresh or report interval: below 10 ms the
// reports are noise (and cost), above a day nobody waits for them. As
// netstacklat's -r, it may be given in bare seconds.
var IntervalRange = cliflag.Range{Min: 10 * time.Millisecond, Max: 24 * time.Hour}

// RunRange bounds --duration (0: until interrupted).
var RunRange = cliflag.Range{Min: time.Millisecond, Max: 365 * 24 * time.Hour, Off: "until interrupted"}

// Options are the shared reporting options.
type Options struct {
	Interval time.Duration
	Count    int
	Duration time.Duration
	Format   string
	formats  []string
}

// Register adds the shared flags to fs. intervalShort is the one-letter
// alias of --interval ("r" for netstacklat compatibility, "" for none);
// formats lists the accepted --format values, the first being the default.
func (o *Options) Register(fs *pflag.FlagSet, intervalShort string, def time.Duration, formats ...string) {
	o.formats = formats
	cliflag.DurationVarP(fs, &o.Interval, "interval", intervalShort, def, IntervalRange, "refresh/report interval (seconds or a duration such as 500ms)")
	cliflag.IntVarP(fs, &o.Count, "count", "", 0, 0, math.MaxInt32, "exit after this many reports (0 = run until interrupted)")
	cliflag.DurationVarP(fs, &o.Duration, "duration", "", 0, RunRange, "exit after this long (seconds or a duration such as 30s; 0 = run until interrupted)")
	fs.StringVar(&o.Format, "format", formats[0], "output format: "+strings.Join(formats, ", "))
	cliflag.Enum(fs, "format", formats...)
}

// Validate checks the values the flag types do not; errors name the flag
// and value (exit 2).
func (o *Options) Validate() error {
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
	t := time.NewTicker(o.Interval)
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
