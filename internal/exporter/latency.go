package exporter

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stacktop/stacktop/internal/hist"
)

// latencyDesc names the histogram as netstacklat's ebpf_exporter
// configuration does, so dashboards built for it work unchanged. The label
// names are fixed for the process's lifetime by the grouping in use.
func latencyDesc(byIface, byCgroup bool) *prometheus.Desc {
	labels := []string{"hook"}
	if byIface {
		labels = append(labels, "iface")
	}
	if byCgroup {
		labels = append(labels, "cgroup")
	}
	return prometheus.NewDesc("netstack_latency_seconds",
		"Time received packets spent in the host network stack before reaching each hook (log2 buckets).",
		labels, nil)
}

// latencyBounds are the upper bounds, in seconds, of the buckets below the
// last one. The last kernel bucket also holds every clamped larger value, so
// it has no finite bound and is reported only through +Inf.
var latencyBounds = func() [hist.MaxSlot]float64 {
	var b [hist.MaxSlot]float64
	for i := range b {
		b[i] = float64(hist.UpperBound(i)) / 1e9
	}
	return b
}()

var latencyPacketsDesc = prometheus.NewDesc("stacktop_latency_packets_total",
	"Packets each latency hook saw, by outcome: recorded, or the reason they were not (see docs/METRICS.md).",
	[]string{"hook", "reason"}, nil)

// histFull is the outcome of a packet dropped because the histogram map was
// full: the latency source's map-full counter.
const histFull = "hist_full"

func (e *Exporter) collectLatency(ch chan<- prometheus.Metric) error {
	series, err := e.cfg.Latency.Read()
	if err != nil {
		return fmt.Errorf("read latency histograms: %w", err)
	}
	counters, err := e.cfg.Latency.Counters()
	if err != nil {
		return fmt.Errorf("read latency counters: %w", err)
	}
	var mapFull uint64
	for _, c := range counters {
		ch <- prometheus.MustNewConstMetric(latencyPacketsDesc, prometheus.CounterValue, float64(c.Count), c.Hook, c.Reason)
		if c.Reason == histFull {
			mapFull += c.Count
		}
	}
	ch <- prometheus.MustNewConstMetric(mapFullDesc, prometheus.CounterValue, float64(mapFull), "latency")
	for _, s := range series {
		labels := []string{s.Hook}
		if e.cfg.LatencyByIface {
			labels = append(labels, s.Iface)
		}
		if e.cfg.LatencyByCgroup {
			labels = append(labels, s.Cgroup)
		}
		ch <- latencyHistogram(e.latencyDesc, &s.Hist, labels)
	}
	return nil
}

// latencyHistogram converts per-bucket nanosecond counts into a Prometheus
// histogram: cumulative counts per upper bound in seconds, sum in seconds.
func latencyHistogram(desc *prometheus.Desc, h *hist.Histogram, labels []string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(latencyBounds))
	var cumulative uint64
	for i, le := range latencyBounds {
		cumulative += h.Buckets[i]
		buckets[le] = cumulative
	}
	count := cumulative + h.Buckets[hist.MaxSlot]
	return prometheus.MustNewConstHistogram(desc, count, float64(h.Sum)/1e9, buckets, labels...)
}
