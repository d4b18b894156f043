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
// netstacklat's -r does ("-r 5" and "-r 500ms" both work).
type Seconds time.Duration

func (s *Seconds) String() string { return time.Duration(*s).String() }
func (s *Seconds) Type() string   { return "duration" }

// Set parses "5", "0.5" or any Go duration ("250ms", "1m").
func (s *Seconds) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		*s = Seconds(time.Duration(f * float64(time.Second)))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("not a number of seconds or a duration like 500ms")
	}
	*s = Seconds(d)
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
	if o.Interval <= 0 {
		return clierr.Usage("interval", o.Interval.String(), "must be positive")
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
