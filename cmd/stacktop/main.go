// Command stacktop shows which connections move the bytes on a Linux host and
// how long received packets wait inside its network stack, using eBPF.
//
// Invoked as tcptop it runs `stacktop top`; as netstacklat, `stacktop latency`.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/stacktop/stacktop/internal/clierr"
)

func main() {
	os.Exit(run(context.Background(), os.Args, os.Stdout, os.Stderr))
}

// aliases maps the names the binary may be linked as to the subcommand they
// stand for, so users of tcptop and netstacklat keep their muscle memory.
var aliases = map[string]string{"tcptop": "top", "netstacklat": "latency"}

func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	args := argv[1:]
	clierr.Prog = filepath.Base(argv[0])
	if sub, ok := aliases[clierr.Prog]; ok {
		args = append([]string{sub}, args...)
	}
	started := false // set once cobra has parsed and validated everything
	root := newRootCmd(stdout, stderr)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		started = true
		return setupLogging(cmd, stderr)
	}
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return clierr.ExitOK
	}
	if !started && clierr.Code(err) == clierr.ExitFailure {
		// Unknown commands, unknown flags and malformed flag values are
		// rejected by cobra before any command runs: that is bad usage.
		err = clierr.Usagef("%v", err)
	}
	fmt.Fprintf(stderr, "error: %v\n", err)
	if clierr.Code(err) == clierr.ExitUsage {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", root.CommandPath())
	}
	return clierr.Code(err)
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "stacktop",
		Short: "eBPF observability for the Linux host network stack",
		Long: `stacktop answers two questions about a Linux host:

  which connections move the bytes, for whom, and how well   (stacktop top, stream)
  how long received packets wait inside the host stack        (stacktop latency)

and exports both to Prometheus (stacktop serve).`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().String("log-level", "warn", "log level: debug, info, warn, error")
	root.AddCommand(newVersionCmd(), newDoctorCmd())
	root.AddCommand(newLatencyCmd())
	root.AddCommand(newTopCmd(), newStreamCmd())
	root.AddCommand(newServeCmd())
	makeTop(root)
	return root
}

func setupLogging(cmd *cobra.Command, stderr io.Writer) error {
	s, _ := cmd.Flags().GetString("log-level")
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return clierr.Usage("log-level", s, "must be one of debug, info, warn, error")
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))
	return nil
}
