// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/cliflag"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/conntrack"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/output"
	"github.com/stacktop/stacktop/internal/tui"
)

func newTopCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top [interval] [count]",
		Short: "Live view of TCP connections and UDP flows (like stream when stdout is not a terminal)",
		Long: `top shows every TCP connection and UDP flow on the host in a live table:
addresses, owning process, state, rates in and out, and smoothed RTT; c adds
bytes, packets, retransmits, Kubernetes pod and cgroup. The header sums up
the host: counts by TCP state, UDP flows, bandwidth, and lost events when any
were lost.
When stdout is not a terminal, or with -C, top prints what stream prints.

As bcc's tcptop: the interval (seconds) and the number of refreshes may
be given as arguments ("tcptop 1 3" is --interval 1 --count 3), -C does not
clear the screen (it prints instead), -S leaves out the summary line, -4 and
-6 select an address family, -p a process.

Keys:
` + indent(tui.KeyHelp, "  "),
		Example: `  stacktop top                       # the live table
  stacktop top --sort rtt -p 1234    # one process, slowest round trips first
  tcptop -C 1 5                      # print five refreshes, one a second
  tcptop -C -S -4                    # print IPv4 connections, no summary lines`,
		Args: cobra.MaximumNArgs(2),
	}
	makeTop(cmd)
	return cmd
}

// makeTop gives cmd the flags and behaviour of `top`; the root command gets
// them too, so that a bare `stacktop` (or `tcptop`) is `stacktop top`.
func makeTop(cmd *cobra.Command) {
	var f connFlags
	fs := cmd.Flags()
	f.register(fs)
	sortFlag := fs.String("sort", string(tui.DefaultSort.Column), tui.SortColumns())
	cliflag.Enum(fs, "sort", tui.SortKeys()...)
	noClear := fs.BoolP("noclear", "C", false, "do not clear the screen: print each refresh as stream does (bcc tcptop's -C)")
	fs.BoolVarP(&f.noSummary, "nosummary", "S", false, "leave out the summary line of each refresh unless it reports lost events (printed text only)")
	var lat topLatencyFlags
	lat.register(fs)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := positionalRunArgs(cmd.Flags(), args); err != nil {
			return err
		}
		sort, err := tui.ParseSort(*sortFlag)
		if err != nil {
			return err
		}
		if f.latencyHooks, err = lat.hooks(cmd.Flags()); err != nil {
			return err
		}
		if sort.Column == tui.ColReadWait && !f.readWait {
			return clierr.Usage("sort", *sortFlag, "sorts by read wait, which needs --read-wait")
		}
		if sort.Column == tui.ColHost && !f.resolve {
			return clierr.Usage("sort", *sortFlag, "sorts by host name, which needs --resolve")
		}
		out := cmd.OutOrStdout()
		live := isTerminal(out) && !*noClear
		switch {
		case f.noSummary && live:
			return clierr.Usage("nosummary", "true", "applies to printed refreshes: add -C (the live table's header is the summary)")
		case f.noSummary && f.run.Format != "text":
			return clierr.Usage("nosummary", "true", "applies to the text format (--format %s carries the counters as data)", f.run.Format)
		case live:
			return f.tui(cmd.Context(), sort)
		}
		f.latencyHooks = 0 // the latency view is the terminal's; stream prints connections
		return f.stream(cmd.Context(), out)
	}
}

// positionalRunArgs reads bcc tcptop's `[interval] [count]` arguments into
// --interval and --count, with their validation; giving both ways is
// refused.
func positionalRunArgs(fs *pflag.FlagSet, args []string) error {
	for i, name := range []string{"interval", "count"}[:len(args)] {
		if fs.Changed(name) {
			return clierr.Usage(name, fs.Lookup(name).Value.String(), "given twice: as a flag and as argument %q", args[i])
		}
		if err := fs.Lookup(name).Value.Set(args[i]); err != nil {
			return clierr.Usage(name, args[i], "argument %d: %v", i+1, err)
		}
	}
	return nil
}

// tui runs the interactive table; --log keeps receiving every refresh,
// also while the display is paused.
func (f *connFlags) tui(ctx context.Context, sort tui.Sort) error {
	return f.track(ctx, func(ctx context.Context, t *conntrack.Tracker, logs []output.Writer, tracer *latency.Tracer) error {
		host, _ := os.Hostname()
		opts := tui.Options{
			Host: host, Kernel: features.KernelRelease(), Backend: backends(t.Choices()),
			Sort: sort, Refresh: f.run, ReadWait: f.readWait, Resolve: f.resolve,
			OnSnapshot: func(s conn.Snapshot) error { return writeAll(logs, s) },
		}
		if f.latencyHooks != 0 {
			opts.Latency = tracer.Read
		}
		return tui.Run(ctx, t.Snapshot, opts)
	})
}

// backends names the hook backends in use: one name when every hook agrees.
func backends(choices []features.Choice) string {
	var names []string
	for _, c := range choices {
		if c.Backend != "" && !slices.Contains(names, string(c.Backend)) { // "": an optional hook refused
			names = append(names, string(c.Backend))
		}
	}
	slices.Sort(names)
	return strings.Join(names, "+")
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
