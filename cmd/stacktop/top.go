package main

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/conntrack"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/output"
	"github.com/stacktop/stacktop/internal/tui"
)

func newTopCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view of TCP connections and UDP flows (like stream when stdout is not a terminal)",
		Long: `top shows every TCP connection and UDP flow on the host in a live table:
addresses, owning process, state, rates in and out, and smoothed RTT; c adds
bytes, packets, retransmits, Kubernetes pod and cgroup. The header sums up
the host: counts by TCP state, UDP flows, bandwidth, and lost events when any
were lost.
When stdout is not a terminal, top prints what stream prints.

Keys:
` + indent(tui.KeyHelp, "  "),
		Args: cobra.NoArgs,
	}
	makeTop(cmd)
	return cmd
}

// makeTop gives cmd the flags and behaviour of `top`; the root command gets
// them too, so that a bare `stacktop` (or `tcptop`) is `stacktop top`.
func makeTop(cmd *cobra.Command) {
	var f connFlags
	f.register(cmd.Flags())
	sortFlag := cmd.Flags().String("sort", string(tui.DefaultSort.Column), tui.SortColumns())
	var lat topLatencyFlags
	lat.register(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
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
		if isTerminal(out) {
			return f.tui(cmd.Context(), sort)
		}
		f.latencyHooks = 0 // the latency view is the terminal's; stream prints connections
		return f.stream(cmd.Context(), out)
	}
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
