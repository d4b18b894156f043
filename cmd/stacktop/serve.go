// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/cliflag"
	"github.com/stacktop/stacktop/internal/connfilter"
	"github.com/stacktop/stacktop/internal/conntrack"
	"github.com/stacktop/stacktop/internal/exporter"
	"github.com/stacktop/stacktop/internal/kube"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/privilege"
	"github.com/stacktop/stacktop/internal/promweb"
	"github.com/stacktop/stacktop/internal/readwait"
	"github.com/stacktop/stacktop/internal/runopts"
	"github.com/stacktop/stacktop/internal/selector"
)

// serveOptions are the flags of stacktop serve: the --web.* flags, the
// latency probe flags of `stacktop latency`, and the connection filters of
// `stacktop stream` that the probe flags do not already cover.
type serveOptions struct {
	web                          promweb.Options
	probes                       probeFlags
	latencyProbes                []string
	collectLatency, collectConns bool
	collectReadWait              bool // off by default: see registerToggle's caller
	compat                       string
	maxSeries                    int
	printVersion                 bool
	pods                         kube.Options
	conns                        connfilter.Options // only --process, --port, --tcp and --udp: the probes' -p, -c, -i, -n select connections too
	udpIdle                      time.Duration
	interval                     time.Duration
	duration                     time.Duration
	perConn                      int
	maxConn                      int
	bpfStats                     bool
	flags                        *pflag.FlagSet // tells an explicit --web.listen-address from its default
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use: "serve",
		// A service logs where it listens and whether with TLS, as every
		// Prometheus exporter does.
		Annotations: map[string]string{defaultLogLevel: "info"},
		Short:       "Serve latency histograms and per-process connection metrics to Prometheus",
		Long: `serve runs the stack-latency probes and the connection tracking and exports
both as Prometheus/OpenMetrics metrics (docs/METRICS.md lists them), by
default on 127.0.0.1:9877 only. --web.config.file enables TLS and basic auth.

By default only tcp-socket-read runs (how long TCP data waited until the
application read it; Cloudflare's configuration), on every kernel alike.
--latency.probes tcp-socket-read,udp-socket-read adds UDP: cheap with the
fentry backend (one program per UDP read), a program on every received
packet, TCP included, with the tracepoint backend. --latency.probes all (or
a list) runs the others, and --at SPEC (as for stacktop latency)
adds a probe at a tracepoint or kernel function of your choosing, its
series labelled hook="SPEC". --sample N records a random 1 in N packets
(reads, at the socket-read probes): the histograms then count samples, and
stacktop_latency_sample_every says N. --latency.compat ebpf_exporter exports the histograms as
netstacklat does under ebpf_exporter. /-/healthy and /-/ready (200 once the
programs are attached) serve health checks.

What it costs: where the kernel refuses fentry (stacktop doctor says), the
defaults run eight programs per request and response of a TCP server, the
UDP accounting's pair on every packet and tcp-socket-read's two per read;
--tcp drops the first, --no-collector.latency the second. Each connection
costs more: two programs at each of its state changes and at its close, and
a closed record in user space, which a server whose clients do not reuse
connections pays per request (docs/METRICS.md, "What serve costs a server",
has what each kept of nginx's requests/s).

The probe flags are those of stacktop latency (netstacklat). -p, -c, -i and
-n also select the connections exported, as --pid, --cgroup, --interface and
--netns do for stacktop stream (one of the listed values must match); without
-n, connections of every network namespace are exported.`,
		Example: `  stacktop serve                                  # http://127.0.0.1:9877/metrics
  stacktop serve --web.listen-address :9877 -I -C # every interface; latency by iface and cgroup
  stacktop serve --web.config.file web.yml        # TLS and/or basic auth
  stacktop serve --latency.probes all             # all seven latency probes
  stacktop serve --latency.probes all --sample 10 # all seven, a tenth of the packets
  stacktop serve --latency.compat ebpf_exporter -I -C # netstacklat's ebpf_exporter series, :9435
  stacktop serve --tcp -4 --connections.max-series 500 # IPv4 TCP only, at most 500 aggregates`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.printVersion {
				_, err := io.WriteString(cmd.OutOrStdout(), versionText())
				return err
			}
			return o.run(cmd.Context())
		},
	}
	o.register(cmd.Flags())
	return cmd
}

// serveAliases are the spellings serve's own flags had before they joined
// the dotted namespace of --web.* and --collector.*: still accepted, never
// shown.
var serveAliases = map[string]string{
	"udp-idle":              "connections.udp-idle",
	"per-connection-series": "connections.per-connection-series",
	"max-series":            "connections.max-series",
	"max-connections":       "connections.max-tracked",
	"bpf-stats":             "bpf.stats",
	"compat":                "latency.compat",
}

// register adds serve's flags. Those it shares with other commands keep
// their names there (--interval, --duration, --backend, the probe and
// selector flags, --tcp, --udp, -4, -6, --kubernetes-logs, --version);
// its own are dotted: --web.*, --collector.*, --connections.*, --latency.*,
// --bpf.*.
func (o *serveOptions) register(fs *pflag.FlagSet) {
	o.flags = fs
	o.web.Register(fs)
	o.probes.register(fs)
	o.conns.RegisterMatchers(fs)
	cliflag.DurationVarP(fs, &o.interval, "interval", "", 5*time.Second, runopts.IntervalRange,
		"connection snapshot interval, and how often the -i/-c/-n selection is checked for what went (seconds or a duration such as 500ms)")
	cliflag.DurationVarP(fs, &o.duration, "duration", "", 0, runopts.RunRange,
		"stop serving after this long (seconds or a duration such as 1h; 0 = until interrupted)")
	registerUDPIdle(fs, &o.udpIdle, "connections.udp-idle", "count a UDP flow closed after this long without datagrams")
	cliflag.IntVarP(fs, &o.perConn, "connections.per-connection-series", "", 0, 0, math.MaxInt32,
		"also export per-connection series for this many of the busiest connections (0 = none)")
	registerMaxTracked(fs, &o.maxConn, "connections.max-tracked")
	cliflag.IntVarP(fs, &o.maxSeries, "connections.max-series", "", exporter.DefaultMaxSeries, 0, math.MaxInt32,
		`(comm, cgroup, proto) aggregates with series of their own; the rest are counted in comm="other" (0: no limit)`)
	fs.BoolVar(&o.bpfStats, "bpf.stats", false,
		"enable the kernel's BPF run statistics while serving, to export per-program run count and time")
	fs.StringSliceVar(&o.latencyProbes, "latency.probes", nil,
		"latency probes to run, comma-separated, or all (default: tcp-socket-read)")
	cliflag.Enum(fs, "latency.probes", append(hookList(latency.AllHooks), "all")...)
	fs.StringVar(&o.compat, "latency.compat", "", "export the latency histograms as another tool does: ebpf_exporter (netstacklat's configuration)")
	cliflag.Enum(fs, "latency.compat", compatEbpfExporter)
	registerToggle(fs, &o.collectLatency, "collector.latency", "the stack-latency histograms (netstacklat)", true)
	registerToggle(fs, &o.collectConns, "collector.connections", "the per-process connection metrics", true)
	// Off by default: per-socket histograms cost a hash update per read on
	// top of the socket-read probes (docs/METRICS.md has the measurement).
	registerToggle(fs, &o.collectReadWait, "collector.read-wait",
		"the read wait per process (stacktop_read_wait_seconds; uses the socket-read latency probes)", false)
	o.pods.Register(fs)
	fs.BoolVar(&o.printVersion, "version", false, "print the version and exit, as exporters do (stacktop --version too)")
	cliflag.Aliases(fs, serveAliases)
}

// serveDefaultProbes are the latency probes serve runs unless told
// otherwise: the one that costs programs per read only and answers the
// question operators leave on everywhere (how long data waited for the
// application), as Cloudflare runs it under ebpf_exporter. udp-socket-read
// is not in it: its FIFO needs a program on every packet received.
var serveDefaultProbes = latency.HookSet(0).With(latency.TCPSocketRead)

// registerToggle adds --name (default on or off) and --no-name, as
// Prometheus exporters spell collector switches. --no-name is an action,
// not a state: its help shows no default (it read "(default true)" for a
// collector that is off).
func registerToggle(fs *pflag.FlagSet, v *bool, name, what string, on bool) {
	*v = on
	fs.BoolVar(v, name, on, "export "+what)
	fs.Var(negated{v}, "no-"+name, "do not export "+what)
	no := fs.Lookup("no-" + name)
	no.NoOptDefVal, no.DefValue = "true", "false"
}

// negated is a boolean flag that sets its target to the opposite.
type negated struct{ v *bool }

func (n negated) String() string { return strconv.FormatBool(!*n.v) }
func (n negated) Type() string   { return "bool" }
func (n negated) Set(s string) error {
	b, err := strconv.ParseBool(s)
	*n.v = !b
	return err
}

// serveConfig is what the two sources are started with.
type serveConfig struct {
	latency   latency.Config
	conns     conntrack.Config
	selection selector.Selection // -p, -c, -i, -n as parsed, to stop when one goes
}

// config validates every flag (exit 2 naming the flag and value).
func (o *serveOptions) config() (serveConfig, error) {
	var c serveConfig
	if o.compat == compatEbpfExporter && !o.flags.Changed("web.listen-address") {
		o.web.ListenAddresses = []string{compatAddress}
	}
	if err := o.web.Validate(); err != nil {
		return c, err
	}
	if o.compat != "" && o.compat != compatEbpfExporter {
		return c, clierr.Usage("latency.compat", o.compat, "the only compatibility mode is %s", compatEbpfExporter)
	}
	if !o.collectLatency && !o.collectConns {
		return c, clierr.Usage("no-collector.connections", "true", "with --no-collector.latency too leaves nothing to export")
	}
	var err error
	if c.latency, c.selection, err = o.probes.config(); err != nil {
		return c, err
	}
	if c.latency.Hooks, err = o.latencyHooks(c.latency.Hooks); err != nil {
		return c, err
	}
	// The probes' selection selects the connections too. The tracker
	// applies it, so --tcp or --udp leaves the other protocol's programs
	// unattached, as in stream.
	sel, err := o.conns.CompileWith(c.selection)
	if err != nil {
		return c, err
	}
	pods, err := o.pods.Resolver()
	if err != nil {
		return c, err
	}
	c.conns = conntrack.Config{UDPIdle: o.udpIdle, Filter: sel, MaxConnections: o.maxConn, Pods: pods, Unordered: true}
	if err := o.readWaitConfig(&c.latency); err != nil {
		return c, err
	}
	return c, nil
}

// readWaitConfig adds the per-socket histograms to the latency tracer
// (--collector.read-wait). The socket-read probes serve runs measure both:
// no second pair of programs. Without the latency collector the tracer runs
// serve's default probes for read wait alone.
func (o *serveOptions) readWaitConfig(c *latency.Config) error {
	if !o.collectReadWait {
		return nil
	}
	switch {
	case !o.collectConns:
		return clierr.Usage("collector.read-wait", "true", "needs the connections collector (read wait is per process, from the connection table)")
	case !o.collectLatency:
		c.Hooks = serveDefaultProbes
	case !c.Hooks.Has(latency.TCPSocketRead) && !c.Hooks.Has(latency.UDPSocketRead):
		return clierr.Usage("collector.read-wait", "true", "needs tcp-socket-read or udp-socket-read among the latency probes")
	case c.SampleEvery > 1:
		return clierr.Usage("collector.read-wait", "true", "cannot be combined with --sample %d: read wait adds up every read", o.probes.sample)
	}
	c.ReadWait, c.MaxSockets = true, uint32(o.maxConn)
	return nil
}

// compatEbpfExporter is the --latency.compat value that exports the latency
// histograms as netstacklat's ebpf_exporter configuration does.
const compatEbpfExporter = "ebpf_exporter"

// compatAddress is where --latency.compat ebpf_exporter listens by default:
// ebpf_exporter's port, on loopback as serve's own default.
const compatAddress = "127.0.0.1:9435"

// latencyHooks is the probe set: --latency.probes, or netstacklat's -e/-d
// (already parsed into fromFlags), or serve's default set.
func (o *serveOptions) latencyHooks(fromFlags latency.HookSet) (latency.HookSet, error) {
	list := strings.Join(o.latencyProbes, ",")
	explicit := len(o.probes.enable) > 0 || len(o.probes.disable) > 0
	switch {
	case !o.collectLatency && len(o.probes.at) > 0:
		return 0, clierr.Usage("no-collector.latency", "true", "cannot be combined with --at %q", o.probes.at[0])
	case !o.collectLatency && (o.latencyProbes != nil || explicit):
		return 0, clierr.Usage("no-collector.latency", "true", "cannot be combined with a choice of latency probes")
	case !o.collectLatency && o.flags.Changed("sample"):
		return 0, clierr.Usage("no-collector.latency", "true", "cannot be combined with --sample %d", o.probes.sample)
	case o.latencyProbes != nil && explicit:
		return 0, clierr.Usage("latency.probes", list, "cannot be combined with -e/--enable-probes or -d/--disable-probes")
	case explicit:
		return fromFlags, nil
	case o.latencyProbes == nil:
		return serveDefaultProbes, nil
	}
	return parseProbeList(o.latencyProbes)
}

// parseProbeList reads a --latency.probes value (serve, top): probe names,
// or all.
func parseProbeList(names []string) (latency.HookSet, error) {
	list := strings.Join(names, ",")
	if list == "all" {
		return latency.DefaultHooks, nil
	}
	var set latency.HookSet
	for _, name := range names {
		h, err := latency.ParseHook(name)
		if err != nil {
			return 0, clierr.Usage("latency.probes", name, "%v, or all", err)
		}
		set = set.With(h)
	}
	if set == 0 {
		return 0, clierr.Usage("latency.probes", list, "names no probe")
	}
	return set, nil
}

func (o *serveOptions) run(ctx context.Context) error {
	c, err := o.config()
	if err != nil {
		return err
	}
	if err := privilege.Check(append(latencyNeeds(c.latency), connNeeds)...); err != nil {
		return err
	}
	// Listen first: a port in use fails before any BPF program is loaded.
	listeners, err := o.web.Listen()
	if err != nil {
		return err
	}
	ctx, cancel := runopts.SignalContext(ctx)
	defer cancel()
	if o.duration > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, o.duration)
		defer stop()
	}
	reg := prometheus.NewRegistry()
	srv, err := o.web.NewServer(reg, version)
	if err != nil {
		return err
	}
	// Serve while the programs load, so /-/healthy answers and /-/ready
	// says they are not attached yet.
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx, listeners) }()
	stop := func() error { // idempotent: the error stays in the channel
		stopServing()
		err := <-served
		served <- err
		return err
	}
	defer stop() // before the programs are closed

	cfg := exporter.Config{
		LatencyByIface:     c.latency.GroupByIface,
		LatencyByCgroup:    c.latency.GroupByCgroup,
		LatencySampleEvery: c.latency.SampleEvery,
		CompatEbpfExporter: o.compat == compatEbpfExporter,
		Version:            version,
		Revision:           buildCommit(),
	}
	if o.bpfStats {
		stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			return fmt.Errorf("--bpf.stats: enable BPF run statistics: %w", err)
		}
		defer stats.Close()
		cfg.BPFStatsEnabled = func() bool { return true }
	}
	if o.collectLatency || o.collectReadWait {
		tracer, err := latency.Start(c.latency)
		if err != nil {
			return fmt.Errorf("%w (see `stacktop doctor`)", err)
		}
		defer tracer.Close()
		if o.collectLatency {
			cfg.Latency = tracer
			cfg.NICClocks = tracer.NICClocks
		}
		if o.collectReadWait {
			c.conns.ReadWait = readwait.New(tracer)
		}
		cfg.Backends = append(cfg.Backends, tracer.Choices()...)
	}
	var polling sync.WaitGroup // ended below, before the deferred Closes
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	if o.collectConns {
		tracker, err := conntrack.Open(c.conns)
		if err != nil {
			return fmt.Errorf("%w (see `stacktop doctor`)", err)
		}
		defer tracker.Close()
		cfg.Backends = append(cfg.Backends, tracker.Choices()...)
		cfg.Connections = exporter.NewConnections(o.perConn)
		cfg.Connections.LimitSeries(o.maxSeries)
		if o.collectReadWait {
			cfg.Connections.ExportReadWait()
		}
		polling.Go(func() {
			cfg.Connections.Poll(pollCtx, tracker, o.interval)
		})
	}
	reg.MustRegister(exporter.New(cfg))
	gone := make(chan error, 1)
	polling.Go(func() { gone <- watchSelection(pollCtx, c.selection, o.interval) })
	srv.SetReady()
	var goneErr error
	select {
	case <-ctx.Done():
	case err := <-served:
		served <- err
	case goneErr = <-gone:
	}
	stopPolling() // the snapshots stop before the tracker closes
	polling.Wait()
	return errors.Join(goneErr, stop())
}

// watchSelection checks the selection every interval and returns what went
// (Selection.Gone, as latency checks at each report), or nil once ctx ends:
// the kernel selects by index, id and inode, so serve would otherwise go on
// exporting series that silently stopped counting.
func watchSelection(ctx context.Context, sel selector.Selection, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := sel.Gone(); err != nil {
				return err
			}
		}
	}
}
