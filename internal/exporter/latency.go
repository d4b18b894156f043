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

func (e *Exporter) collectLatency(ch chan<- prometheus.Metric) error {
	series, err := e.cfg.Latency.Read()
	if err != nil {
		return fmt.Errorf("read latency histograms: %w", err)
	}
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
