// SPDX-License-Identifier: Apache-2.0

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
	"strings"

	"github.com/spf13/cobra"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/cliflag"
)

func main() {
	os.Exit(run(context.Background(), os.Args, os.Stdout, os.Stderr))
}

// aliases maps the names the binary may be linked as to the command they
// stand for, so users of tcptop and netstacklat keep their muscle memory:
// invoked so, that command is the root, and its help says its name.
var aliases = map[string]func() *cobra.Command{"tcptop": newTopCmd, "netstacklat": newLatencyCmd}

func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	clierr.Prog = filepath.Base(argv[0])
	root := newRootCmd()
	if alias, ok := aliases[clierr.Prog]; ok {
		root = alias()
		root.Use = clierr.Prog + strings.TrimPrefix(root.Use, root.Name()) // its arguments stay
	}
	setupRoot(root, stdout, stderr)
	started := false // set once cobra has parsed and validated everything
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		started = true
		return setupLogging(cmd, stderr)
	}
	root.SetArgs(argv[1:])
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

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "stacktop",
		Short: "eBPF observability for the Linux host network stack",
		Long: `stacktop answers two questions about a Linux host:

  which connections move the bytes, for whom, and how well   (stacktop top, stream)
  how long received packets wait inside the host stack        (stacktop latency)

and exports both to Prometheus (stacktop serve).`,
		Example: `  stacktop                 # the live connection table, as stacktop top
  stacktop latency -r 1    # stack latency histograms every second
  stacktop serve           # Prometheus metrics on http://127.0.0.1:9877/metrics
  stacktop doctor          # what this kernel allows, and why anything is refused`,
	}
	root.AddCommand(newVersionCmd(), newDoctorCmd())
	root.AddCommand(newLatencyCmd())
	root.AddCommand(newTopCmd(), newStreamCmd())
	root.AddCommand(newServeCmd(), newManCmd(), newMarkdownCmd())
	makeTop(root)
	return root
}

// setupRoot gives the command that runs as the program (stacktop, or the
// command an alias names) what every invocation shares: --version,
// --log.level, --log.format, and errors reported by run rather than by cobra.
func setupRoot(root *cobra.Command, stdout, stderr io.Writer) {
	root.SilenceErrors, root.SilenceUsage = true, true
	root.Version = version
	root.SetVersionTemplate(versionText())
	root.SetOut(stdout)
	root.SetErr(stderr)
	// --log.* are stacktop's own messages on stderr, spelt as Prometheus
	// exporters spell them; top's and stream's --log FILE is the
	// connection log, data, not diagnostics.
	fs := root.PersistentFlags()
	logLevel := fs.String("log.level", "warn", "level of stacktop's own messages on stderr: debug, info, warn, error")
	// The spelling before the Prometheus exporter convention.
	fs.StringVar(logLevel, "log-level", "warn", "log level (alias of --log.level)")
	fs.MarkHidden("log-level")
	fs.String("log.format", "logfmt", "format of stacktop's own messages on stderr: logfmt, json")
	cliflag.Enum(fs, "log.level", "debug", "info", "warn", "error")
	cliflag.Enum(fs, "log.format", "logfmt", "json")
	cliflag.RegisterCompletions(root)
	strictTopics(root)
}

// strictTopics makes `help TOPIC` and `completion SHELL` refuse what they do
// not know (exit 2): cobra prints help for it and exits 0.
func strictTopics(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			show := c.Run
			c.Run = nil
			c.RunE = func(c *cobra.Command, args []string) error {
				if topic, rest, err := c.Root().Find(args); err != nil || topic == nil || len(rest) > 0 {
					return clierr.Usagef("unknown help topic %q", strings.Join(args, " "))
				}
				show(c, args)
				return nil
			}
		case "completion":
			// Runnable, so that its NoArgs applies to an unknown shell.
			c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		}
	}
}

// defaultLogLevel is the annotation by which a command logs at another
// level than warn unless told otherwise.
const defaultLogLevel = "log.level"

func setupLogging(cmd *cobra.Command, stderr io.Writer) error {
	s, _ := cmd.Flags().GetString("log.level")
	if l, ok := cmd.Annotations[defaultLogLevel]; ok && !cmd.Flags().Changed("log.level") && !cmd.Flags().Changed("log-level") {
		s = l
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return clierr.Usage("log.level", s, "must be one of debug, info, warn, error")
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f, _ := cmd.Flags().GetString("log.format"); f {
	case "logfmt":
		slog.SetDefault(slog.New(slog.NewTextHandler(stderr, opts)))
	case "json":
		slog.SetDefault(slog.New(slog.NewJSONHandler(stderr, opts)))
	default:
		return clierr.Usage("log.format", f, "must be logfmt or json")
	}
	return nil
}
