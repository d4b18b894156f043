package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/connfilter"
	"github.com/stacktop/stacktop/internal/conntrack"
	"github.com/stacktop/stacktop/internal/exporter"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/privilege"
	"github.com/stacktop/stacktop/internal/promweb"
	"github.com/stacktop/stacktop/internal/runopts"
	"github.com/stacktop/stacktop/internal/selector"
)

// serveOptions are the flags of stacktop serve: the --web.* flags, the
// latency probe flags of `stacktop latency`, and the connection filters of
// `stacktop stream` that the probe flags do not already cover.
type serveOptions struct {
	web      promweb.Options
	probes   probeFlags
	conns    connfilter.Options // only --process, --port, --tcp and --udp: the probes' -p, -c, -i, -n select connections too
	udpIdle  time.Duration
	interval runopts.Seconds
	duration time.Duration
	perConn  int
	maxConn  int
	bpfStats bool
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve latency histograms and per-process connection metrics to Prometheus",
		Long: `serve runs the stack-latency probes and the connection tracking and exports
both as Prometheus/OpenMetrics metrics (docs/METRICS.md lists them), by
default on 127.0.0.1:9877 only. --web.config.file enables TLS and basic auth.

The probe flags are those of stacktop latency (netstacklat). -p, -c, -i and
-n also select the connections exported, as --pid, --cgroup, --interface and
--netns do for stacktop stream (one of the listed values must match); without
-n, connections of every network namespace are exported.`,
		Example: `  stacktop serve                                  # http://127.0.0.1:9877/metrics
  stacktop serve --web.listen-address :9877 -I -C # every interface; latency by iface and cgroup
  stacktop serve --web.config.file web.yml        # TLS and/or basic auth`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context()) },
	}
	o.register(cmd.Flags())
	return cmd
}

func (o *serveOptions) register(fs *pflag.FlagSet) {
	o.web.Register(fs)
	o.probes.register(fs)
	o.conns.RegisterMatchers(fs)
	o.interval = runopts.Seconds(5 * time.Second)
	fs.DurationVar(&o.udpIdle, "udp-idle", conntrack.DefaultUDPIdle, "count a UDP flow closed after this long without datagrams")
	fs.Var(&o.interval, "interval", "connection snapshot interval (seconds or a duration such as 500ms)")
	fs.DurationVar(&o.duration, "duration", 0, "stop serving after this long, e.g. 1h (0 = until interrupted)")
	fs.IntVar(&o.perConn, "per-connection-series", 0,
		"also export per-connection series for this many of the busiest connections (0 = none)")
	registerMaxConnections(fs, &o.maxConn)
	fs.BoolVar(&o.bpfStats, "bpf-stats", false,
		"enable the kernel's BPF run statistics while serving, to export per-program run count and time")
}

// serveConfig is what the two sources are started with.
type serveConfig struct {
	latency latency.Config
	conns   conntrack.Config
	sel     *connfilter.Filter
}

// config validates every flag (exit 2 naming the flag and value).
func (o *serveOptions) config() (serveConfig, error) {
	var c serveConfig
	if err := o.web.Validate(); err != nil {
		return c, err
	}
	switch {
	case o.interval <= 0:
		return c, clierr.Usage("interval", o.interval.String(), "must be positive")
	case o.duration < 0:
		return c, clierr.Usage("duration", o.duration.String(), "must not be negative")
	case o.perConn < 0:
		return c, clierr.Usage("per-connection-series", strconv.Itoa(o.perConn), "must not be negative")
	case o.udpIdle <= 0:
		return c, clierr.Usage("udp-idle", o.udpIdle.String(), "must be positive")
	}
	if err := checkMaxConnections(o.maxConn); err != nil {
		return c, err
	}
	var latencySel selector.Selection
	var err error
	if c.latency, latencySel, err = o.probes.config(); err != nil {
		return c, err
	}
	// The probes' selection selects the connections too, except that
	// without -n connections of every namespace are exported.
	if !o.probes.sel.NetnsChanged() {
		latencySel.Netns = selector.Netns{All: true}
	}
	if c.sel, err = o.conns.CompileWith(latencySel); err != nil {
		return c, err
	}
	c.conns = conntrack.Config{Backend: c.latency.Backend, UDPIdle: o.udpIdle, MaxConnections: o.maxConn}
	return c, nil
}

// selectedConns is the tracker's snapshots restricted to the selection.
type selectedConns struct {
	tracker *conntrack.Tracker
	sel     *connfilter.Filter
}

func (s selectedConns) SnapshotInto(records []conn.Record) (conn.Snapshot, error) {
	snap, err := s.tracker.SnapshotInto(records)
	snap.Records = slices.DeleteFunc(snap.Records, func(r conn.Record) bool { return !s.sel.Match(&r) })
	return snap, err
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
	cfg := exporter.Config{
		LatencyByIface:  c.latency.GroupByIface,
		LatencyByCgroup: c.latency.GroupByCgroup,
		Connections:     exporter.NewConnections(o.perConn),
		Version:         version,
		Revision:        buildCommit(),
	}
	if o.bpfStats {
		stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			return fmt.Errorf("--bpf-stats: enable BPF run statistics: %w", err)
		}
		defer stats.Close()
		cfg.BPFStatsEnabled = func() bool { return true }
	}
	tracer, err := latency.Start(c.latency)
	if err != nil {
		return fmt.Errorf("%w (see `stacktop doctor`)", err)
	}
	defer tracer.Close()
	tracker, err := conntrack.Open(c.conns)
	if err != nil {
		return fmt.Errorf("%w (see `stacktop doctor`)", err)
	}
	defer tracker.Close()
	cfg.Latency = tracer
	cfg.Backends = append(slices.Clone(tracer.Choices()), tracker.Choices()...)

	var polling sync.WaitGroup
	defer polling.Wait() // before the tracker closes
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	polling.Go(func() {
		cfg.Connections.Poll(pollCtx, selectedConns{tracker, c.sel}, time.Duration(o.interval))
	})

	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter.New(cfg),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return o.web.Serve(ctx, listeners, reg, version)
}
