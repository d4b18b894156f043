// SPDX-License-Identifier: Apache-2.0

// Package exporter turns what stacktop measures in the kernel into Prometheus
// metrics: the stack-latency histograms, read from the BPF maps at scrape
// time; per-process and per-cgroup connection aggregates, accumulated from
// connection snapshots; and stacktop's own health (build, chosen backends,
// drops, BPF program run statistics). docs/METRICS.md lists every metric.
package exporter

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/latency"
)

// LatencySource yields the cumulative-since-start latency histograms, one
// Series per hook (and interface and cgroup when grouping is on), and per
// hook how many packets were recorded or skipped and why. The exporter calls
// it once per scrape, never concurrently.
type LatencySource interface {
	Read() ([]hist.Series, error)
	Counters() ([]latency.Counter, error)
}

// Config says what the exporter reports. Sources left nil are not reported.
type Config struct {
	Latency LatencySource
	// LatencyByIface and LatencyByCgroup add the iface and cgroup labels to
	// netstack_latency_seconds; they must match the grouping the latency
	// source was started with, so every series carries the same label names.
	LatencyByIface  bool
	LatencyByCgroup bool
	// LatencySampleEvery is the latency source's sampling: each packet
	// recorded with probability 1/LatencySampleEvery (0 or 1: every one),
	// exported as stacktop_latency_sample_every.
	LatencySampleEvery uint32
	// CompatEbpfExporter exports the latency histograms as
	// ebpf_exporter_netstack_latency_seconds, exactly as ebpf_exporter does
	// with netstacklat's configuration (docs/METRICS.md), instead of
	// netstack_latency_seconds.
	CompatEbpfExporter bool
	// NICClocks reports the nic probe's conversion of each stamping
	// interface's clock, exported as the error bound of a converted stamp;
	// nil: not exported.
	NICClocks func() []latency.NICClock

	Connections *Connections

	// Backends are the per-hook backend choices made at start-up.
	Backends []features.Choice
	// BPFStatsEnabled reports whether the kernel is collecting run
	// statistics (kernel.bpf_stats_enabled, or a stats fd we hold); nil means
	// read the sysctl.
	BPFStatsEnabled func() bool

	Version, Revision string
}

// Exporter is a prometheus.Collector over the configured sources. Scrapes are
// serialized: concurrent scrapes (several Prometheus servers) take turns
// reading the kernel maps, so the sources need no locking for them.
type Exporter struct {
	cfg         Config
	latencyDesc *prometheus.Desc

	mu           sync.Mutex
	programNames map[uint32]string // by program ID
	cgroups      *cgroup.Resolver  // names cgroups for CompatEbpfExporter; nil without a v2 mount
}

// New returns an Exporter for cfg.
func New(cfg Config) *Exporter {
	if cfg.BPFStatsEnabled == nil {
		cfg.BPFStatsEnabled = sysctlBPFStatsEnabled
	}
	e := &Exporter{
		cfg:          cfg,
		latencyDesc:  latencyDesc(cfg.LatencyByIface, cfg.LatencyByCgroup),
		programNames: map[uint32]string{},
	}
	if cfg.CompatEbpfExporter {
		e.latencyDesc = ebpfExporterDesc
		e.cgroups, _ = cgroup.NewResolver() // without one, ids stay unknown, as for ebpf_exporter
	}
	return e
}

var (
	buildInfoDesc = prometheus.NewDesc("stacktop_build_info",
		"Always 1; labels say which stacktop build is running.",
		[]string{"version", "revision", "goversion"}, nil)
	backendDesc = prometheus.NewDesc("stacktop_probe_backend_info",
		"Always 1; says which backend implements each hook (see stacktop doctor for refused ones).",
		[]string{"hook", "backend"}, nil)
	scrapeDurationDesc = prometheus.NewDesc("stacktop_scrape_duration_seconds",
		"Time the last scrape spent reading each source.",
		[]string{"source"}, nil)
	scrapeErrorDesc = prometheus.NewDesc("stacktop_scrape_error",
		"1 if the last scrape could not read the source (the error is logged), else 0.",
		[]string{"source"}, nil)
)

// Describe sends every descriptor the exporter may use.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{buildInfoDesc, backendDesc, scrapeDurationDesc, scrapeErrorDesc} {
		ch <- d
	}
	ch <- e.latencyDesc
	ch <- latencyPacketsDesc
	ch <- latencySampleDesc
	ch <- nicClockErrorDesc
	describeConnections(ch)
	describePrograms(ch)
}

// Collect reads every source and sends its metrics.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(buildInfoDesc, prometheus.GaugeValue, 1,
		e.cfg.Version, e.cfg.Revision, runtime.Version())
	for _, c := range e.cfg.Backends {
		ch <- prometheus.MustNewConstMetric(backendDesc, prometheus.GaugeValue, 1, c.Hook, string(c.Backend))
	}
	if e.cfg.Latency != nil {
		e.timed(ch, "latency", func() error { return e.collectLatency(ch) })
	}
	if e.cfg.Connections != nil {
		e.timed(ch, "connections", func() error { return e.cfg.Connections.collect(ch) })
	}
	e.timed(ch, "bpf_programs", func() error { return e.collectPrograms(ch) })
}

// timed runs one source's collection and reports how long it took and
// whether it failed, so a broken source shows up in Prometheus instead of
// failing the whole scrape. A source that panics has failed: the other
// sources are still collected, and the process keeps serving.
func (e *Exporter) timed(ch chan<- prometheus.Metric, source string, collect func() error) {
	start := time.Now()
	err := recovered(collect)
	failed := 0.0
	if err != nil {
		failed = 1
		slog.Error("scrape failed", "source", source, "err", err)
	}
	ch <- prometheus.MustNewConstMetric(scrapeDurationDesc, prometheus.GaugeValue,
		time.Since(start).Seconds(), source)
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, failed, source)
}

// recovered runs collect and turns a panic into its error.
func recovered(collect func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return collect()
}
