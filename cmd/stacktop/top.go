package main

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func newTopCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view of TCP connections and UDP flows (like stream when stdout is not a terminal)",
		Args:  cobra.NoArgs,
	}
	makeTop(cmd)
	return cmd
}

// makeTop gives cmd the flags and behaviour of `top`; the root command gets
// them too, so that a bare `stacktop` (or `tcptop`) is `stacktop top`.
func makeTop(cmd *cobra.Command) {
	var f connFlags
	f.register(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		out := cmd.OutOrStdout()
		if isTerminal(out) {
			return runTUI(cmd.Context(), &f, out)
		}
		return f.stream(cmd.Context(), out)
	}
}

// runTUI is the interactive view; until the TUI lands, a terminal gets the
// stream too.
func runTUI(ctx context.Context, f *connFlags, out io.Writer) error {
	return f.stream(ctx, out)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
