// SPDX-License-Identifier: Apache-2.0

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/cliflag"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/connfilter"
	"github.com/stacktop/stacktop/internal/conntrack"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/kube"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/output"
	"github.com/stacktop/stacktop/internal/privilege"
	"github.com/stacktop/stacktop/internal/readwait"
	"github.com/stacktop/stacktop/internal/resolve"
	"github.com/stacktop/stacktop/internal/runopts"
)

// connFlags are the flags of the connection commands (top, stream).
type connFlags struct {
	run     runopts.Options
	filter  connfilter.Options
	log     string
	udpIdle time.Duration
	backend string
	maxConn int
	pods    kube.Options
	// readWait runs the socket-read latency probes for each connection's
	// read wait (off by default: two program runs per TCP read on the
	// tracepoint backend).
	readWait bool
	// noSummary leaves out the text footer of each refresh unless it
	// reports a loss (top's -S, as bcc's tcptop).
	noSummary bool
	resolve   bool // --resolve: name remote addresses
	// latencyHooks are the stack-latency probes top's latency view shows
	// (top --latency); one tracer runs them and read wait's.
	latencyHooks latency.HookSet
}

func (f *connFlags) register(fs *pflag.FlagSet) {
	f.run.Register(fs, "r", time.Second, output.Formats...)
	f.filter.Register(fs)
	fs.StringVar(&f.log, "log", "", "also append every refresh to `FILE` as CSV rows, a connection log that survives restarts (created with a header if absent; --log.level is about stacktop's own messages)")
	registerUDPIdle(fs, &f.udpIdle, "udp-idle", "report a UDP flow closed after this long without datagrams")
	registerBackend(fs, &f.backend, "UDP accounting: auto, fentry (programs that run for UDP only) or tracepoint (cgroup_skb programs on every packet); the TCP hooks have one implementation")
	registerMaxTracked(fs, &f.maxConn, "max-tracked")
	cliflag.Aliases(fs, map[string]string{"max-connections": "max-tracked"})
	f.pods.Register(fs)
	fs.BoolVar(&f.resolve, "resolve", false,
		"name remote addresses through the system resolver (/etc/hosts, then DNS), in the background: remote_host, the TUI's Host column")
	fs.BoolVar(&f.readWait, "read-wait", false,
		"also measure how long each connection's received data waited until its application read it (read_wait_* fields; runs the socket-read latency probes)")
}

// registerMaxTracked adds the size of the connection tables, shared by top,
// stream (--max-tracked) and serve (--connections.max-tracked). Its old
// name, --max-connections, stays an alias only: beside serve's
// --web.max-connections (HTTP connections) it meant two things.
func registerMaxTracked(fs *pflag.FlagSet, n *int, name string) {
	cliflag.IntVarP(fs, n, name, "", conntrack.DefaultMaxConnections, conntrack.MinMaxConnections, conntrack.MaxMaxConnections,
		"size of the kernel's TCP socket table and of its UDP flow table (each), and the most closed connections held between two refreshes; sockets beyond it are counted as map full, closes beyond it as lost")
}

// udpIdleRange bounds --udp-idle: a flow idle for a day is gone.
var udpIdleRange = cliflag.Range{Min: time.Millisecond, Max: 24 * time.Hour}

// registerUDPIdle adds the idle time after which a UDP flow counts as closed.
func registerUDPIdle(fs *pflag.FlagSet, d *time.Duration, name, usage string) {
	cliflag.DurationVarP(fs, d, name, "", conntrack.DefaultUDPIdle, udpIdleRange, usage+" (seconds or a duration such as 30s)")
}

// backendNames are the values of --backend.
var backendNames = []string{string(features.Auto), string(features.FentryBE), string(features.Tracepoint)}

// registerBackend adds --backend (validated by features.ParseBackend).
func registerBackend(fs *pflag.FlagSet, b *string, usage string) {
	fs.StringVar(b, "backend", string(features.Auto), usage)
	cliflag.Enum(fs, "backend", backendNames...)
}

// connNeeds is what connection tracking needs beyond loading its programs.
var connNeeds = privilege.Need{Cap: privilege.NetAdmin, Why: "to attach the cgroup_skb programs that count bytes and packets"}

// config validates every flag (exit 2 naming the flag and value).
func (f *connFlags) config() (conntrack.Config, error) {
	if err := f.run.Validate(); err != nil {
		return conntrack.Config{}, err
	}
	backend, err := features.ParseBackend(f.backend)
	if err != nil {
		return conntrack.Config{}, err
	}
	filter, err := f.filter.Compile()
	if err != nil {
		return conntrack.Config{}, err
	}
	if f.log != "" {
		if err := output.CheckLog(f.log); err != nil {
			return conntrack.Config{}, err
		}
	}
	pods, err := f.pods.Resolver()
	if err != nil {
		return conntrack.Config{}, err
	}
	cfg := conntrack.Config{UDPIdle: f.udpIdle, Filter: filter, MaxConnections: f.maxConn, Pods: pods, Backend: backend}
	if f.resolve {
		cfg.Hosts = resolve.New()
	}
	return cfg, nil
}

func newStreamCmd() *cobra.Command {
	var f connFlags
	cmd := &cobra.Command{
		Use:   "stream",
		Short: "Print every TCP connection and UDP flow once per refresh (text, JSON lines or CSV)",
		Long: `stream prints one line (or JSON object, or CSV row) per connection per refresh:
addresses, owner, state, bytes and packets in/out, rates, smoothed RTT and
retransmits. New connections are marked [NEW], closed ones appear once with
their final totals [CLOSED], and connections that existed before start-up
[PARTIAL]. Every refresh ends with the loss counters.`,
		Example: `  stacktop stream --tcp --count 3              # three refreshes of the TCP connections
  stacktop stream --format json -p 1234         # one process's connections as JSON lines
  stacktop stream -6 --port 443 --log conns.csv # IPv6 connections to or from port 443, also into a CSV file`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.stream(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f.register(cmd.Flags())
	return cmd
}

// stream runs the tracker and writes a snapshot every refresh.
func (f *connFlags) stream(ctx context.Context, stdout io.Writer) error {
	return f.track(ctx, func(ctx context.Context, t *conntrack.Tracker, logs []output.Writer, _ *latency.Tracer) error {
		writers := append([]output.Writer{output.New(f.run.Format, stdout, !f.noSummary)}, logs...)
		var records []conn.Record // written, then lent back for the next refresh
		return f.run.Loop(ctx, func(bool) error {
			snap, err := t.SnapshotInto(records)
			if err != nil {
				return err
			}
			records = snap.Records
			return writeAll(writers, snap)
		})
	})
}

// track validates the flags, checks privileges, opens the --log file and
// the tracker, and lends them to use until it returns. use's ctx ends on
// SIGINT, SIGTERM or SIGHUP.
func (f *connFlags) track(ctx context.Context, use func(context.Context, *conntrack.Tracker, []output.Writer, *latency.Tracer) error) error {
	cfg, err := f.config()
	if err != nil {
		return err
	}
	latencyCfg := f.latencyConfig(cfg)
	if err := privilege.Check(append([]privilege.Need{connNeeds}, latencyNeeds(latencyCfg)...)...); err != nil {
		return err
	}
	var logs []output.Writer
	if f.log != "" {
		l, err := output.OpenLog(f.log)
		if err != nil {
			return err
		}
		defer l.Close()
		logs = append(logs, l)
	}
	var tracer *latency.Tracer
	if latencyCfg.Hooks != 0 {
		if tracer, err = latency.Start(latencyCfg); err != nil {
			return fmt.Errorf("%s: %w (see `stacktop doctor`)", f.latencyFlag(), err)
		}
		defer tracer.Close()
		for _, c := range tracer.Choices() {
			slog.Info("latency hook attached", "hook", c.Hook, "backend", c.Backend)
		}
		if f.readWait {
			cfg.ReadWait = readwait.New(tracer)
		}
	}
	t, err := conntrack.Open(cfg)
	if err != nil {
		return err
	}
	defer t.Close()
	for _, c := range t.Choices() {
		slog.Info("connection hook attached", "hook", c.Hook, "backend", c.Backend, "refused", c.Refused)
	}
	ctx, stop := runopts.SignalContext(ctx)
	defer stop()
	return use(ctx, t, logs, tracer)
}

// latencyConfig is the latency tracer of top --latency and --read-wait
// together: the probes of either, read wait's histograms per socket only
// with --read-wait. No hooks: neither is on.
func (f *connFlags) latencyConfig(c conntrack.Config) latency.Config {
	cfg := latency.Config{Backend: c.Backend, Hooks: f.latencyHooks}
	if f.readWait {
		rw := readWaitConfig(c)
		cfg.Hooks |= rw.Hooks
		cfg.ReadWait, cfg.MaxSockets = true, rw.MaxSockets
	}
	return cfg
}

// latencyFlag names the flag that started the latency tracer, for errors.
func (f *connFlags) latencyFlag() string {
	if f.latencyHooks != 0 {
		return "--latency"
	}
	return "--read-wait"
}

// readWaitConfig is the latency tracer behind --read-wait: the socket-read
// probes of the protocols tracked, with per-socket histograms for as many
// sockets as the connection table holds.
func readWaitConfig(c conntrack.Config) latency.Config {
	cfg := latency.Config{Backend: c.Backend, ReadWait: true, MaxSockets: uint32(cmp.Or(c.MaxConnections, conntrack.DefaultMaxConnections))}
	tcp, udp := c.Filter.Protocols()
	if tcp {
		cfg.Hooks = cfg.Hooks.With(latency.TCPSocketRead)
	}
	if udp {
		cfg.Hooks = cfg.Hooks.With(latency.UDPSocketRead)
	}
	return cfg
}

// writeAll gives the snapshot to every writer, even after one fails.
func writeAll(writers []output.Writer, s conn.Snapshot) error {
	var errs []error
	for _, w := range writers {
		errs = append(errs, w.Write(s))
	}
	return errors.Join(errs...)
}
