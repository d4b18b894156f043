package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/exporter"
	"github.com/stacktop/stacktop/internal/privilege"
	"github.com/stacktop/stacktop/internal/promweb"
	"github.com/stacktop/stacktop/internal/runopts"
)

// serveOptions are the flags of stacktop serve besides the --web.* ones.
type serveOptions struct {
	web      promweb.Options
	interval runopts.Seconds
	duration time.Duration
	perConn  int
	bpfStats bool
}

func (o *serveOptions) validate() error {
	if err := o.web.Validate(); err != nil {
		return err
	}
	if o.interval <= 0 {
		return clierr.Usage("interval", o.interval.String(), "must be positive")
	}
	if o.duration < 0 {
		return clierr.Usage("duration", o.duration.String(), "must not be negative")
	}
	if o.perConn < 0 {
		return clierr.Usage("per-connection-series", strconv.Itoa(o.perConn), "must not be negative")
	}
	return nil
}

func newServeCmd() *cobra.Command {
	o := serveOptions{interval: runopts.Seconds(5 * time.Second)}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve latency histograms and per-process connection metrics to Prometheus",
		Long: `serve runs the stack-latency probes and the connection tracking and exports
both as Prometheus/OpenMetrics metrics (docs/METRICS.md lists them), by
default on 127.0.0.1:9877 only. --web.config.file enables TLS and basic auth.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			if err := privilege.Check(true); err != nil {
				return err
			}
			return serve(cmd, &o)
		},
	}
	fs := cmd.Flags()
	o.web.Register(fs)
	fs.Var(&o.interval, "interval", "connection snapshot interval (seconds or a duration such as 500ms)")
	fs.DurationVar(&o.duration, "duration", 0, "stop serving after this long, e.g. 1h (0 = until interrupted)")
	fs.IntVar(&o.perConn, "per-connection-series", 0,
		"also export per-connection series for this many of the busiest connections (0 = none)")
	fs.BoolVar(&o.bpfStats, "bpf-stats", false,
		"enable the kernel's BPF run statistics while serving, to export per-program run count and time")
	return cmd
}

func serve(cmd *cobra.Command, o *serveOptions) error {
	// Listen first: a port in use fails before any BPF program is loaded.
	listeners, err := o.web.Listen()
	if err != nil {
		return err
	}
	ctx, cancel := runopts.SignalContext(cmd.Context())
	defer cancel()
	if o.duration > 0 {
		var stop func()
		ctx, stop = context.WithTimeout(ctx, o.duration)
		defer stop()
	}
	cfg := exporter.Config{Version: version, Revision: buildCommit()}
	if o.bpfStats {
		stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			return fmt.Errorf("--bpf-stats: enable BPF run statistics: %w", err)
		}
		defer stats.Close()
		cfg.BPFStatsEnabled = func() bool { return true }
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter.New(cfg),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return o.web.Serve(ctx, listeners, reg, version)
}
