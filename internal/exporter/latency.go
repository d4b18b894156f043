// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"fmt"
	"math"
	"net"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/termsafe"
)

// latencyDesc names stacktop's own histogram. The label names are fixed for
// the process's lifetime by the grouping in use.
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

// ebpfExporterDesc is netstacklat's histogram as ebpf_exporter exports it
// with netstacklat.yaml: the exporter's namespace prefixed to the map name,
// and every label of the map key always present.
var ebpfExporterDesc = prometheus.NewDesc("ebpf_exporter_netstack_latency_seconds",
	"Latency for packets (skbs) to reach various points in the kernel network stack",
	[]string{"cgroup", "iface", "hook"}, nil)

// ebpfExporterBounds are ebpf_exporter's exp2 bucket bounds for
// netstacklat.yaml (bucket_min 0, bucket_max 34, multiplier 1e-9): like
// ours, plus a finite bound for the last kernel bucket, which also holds
// every larger value it clamps.
var ebpfExporterBounds = func() [hist.NBuckets]float64 {
	var b [hist.NBuckets]float64
	for i := range b {
		b[i] = math.Exp2(float64(i)) * 0.000000001
	}
	return b
}()

// ebpfExporterLabels names a series' cgroup and interface as ebpf_exporter's
// decoders do: the cgroup's absolute path in the file system (the cgroup
// decoder walks /sys/fs/cgroup), "unknown_cgroup_id:<id>" for an id that is
// 0 (not grouped) or gone; the interface's name, "unknown:<index>" for an
// index that is 0 (not grouped) or gone. ebpf_exporter sees only its own
// namespace: an interface of another (-n -1) keeps stacktop's own label,
// "<name>@<netns>" (docs/METRICS.md), so it stays a series of its own.
func (e *Exporter) ebpfExporterLabels(s *hist.Series, ifaces map[uint32]string, ownNetns uint64) []string {
	cgroupPath := fmt.Sprintf("unknown_cgroup_id:%d", s.CgroupID)
	if s.CgroupID != 0 && e.cgroups != nil {
		if p, ok := e.cgroups.Lookup(s.CgroupID); ok {
			cgroupPath = strings.TrimSuffix(e.cgroups.Root()+p, "/")
		}
	}
	iface, ok := ifaces[s.Ifindex]
	switch {
	case s.Netns != 0 && s.Netns != ownNetns:
		iface = s.Iface
	case !ok:
		iface = fmt.Sprintf("unknown:%d", s.Ifindex)
	}
	return []string{cgroupPath, iface, s.Hook}
}

var latencyPacketsDesc = prometheus.NewDesc("stacktop_latency_packets_total",
	"Packets each latency hook saw, by outcome: recorded, or the reason they were not (see docs/METRICS.md).",
	[]string{"hook", "reason"}, nil)

var latencySampleDesc = prometheus.NewDesc("stacktop_latency_sample_every",
	"The latency histograms record a random 1 in this many packets (reads, at the socket-read probes), --sample; 1: every packet. Multiply their counts by it to estimate packets.",
	nil, nil)

var nicClockErrorDesc = prometheus.NewDesc("stacktop_latency_nic_clock_error_seconds",
	"Bound on the error of the nic probe's conversion of an interface's hardware stamps (PHC time) to the system clock, until the next refresh: a nic sample may be off by as much.",
	[]string{"iface", "phc"}, nil)

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
	ch <- prometheus.MustNewConstMetric(latencySampleDesc, prometheus.GaugeValue, float64(max(e.cfg.LatencySampleEvery, 1)))
	if e.cfg.NICClocks != nil {
		for _, c := range e.cfg.NICClocks() {
			ch <- prometheus.MustNewConstMetric(nicClockErrorDesc, prometheus.GaugeValue, float64(c.ErrorNs)/1e9,
				c.Interface, fmt.Sprintf("/dev/ptp%d", c.PHC))
		}
	}
	if e.cfg.CompatEbpfExporter {
		ifaces := map[uint32]string{}
		if ifcs, err := net.Interfaces(); err == nil {
			for _, ifc := range ifcs {
				ifaces[uint32(ifc.Index)] = termsafe.ValidUTF8(ifc.Name)
			}
		}
		var own unix.Stat_t
		_ = unix.Stat("/proc/self/ns/net", &own) // without it, every namespace is labelled as foreign
		for _, s := range series {
			// The sum as ebpf_exporter computes it, to the last bit.
			sum := float64(s.Hist.Sum) * 0.000000001
			ch <- cumulativeHistogram(ebpfExporterDesc, s.Hist.Buckets[:], ebpfExporterBounds[:], sum, e.ebpfExporterLabels(&s, ifaces, own.Ino))
		}
		return nil
	}
	for _, s := range series {
		labels := []string{s.Hook}
		if e.cfg.LatencyByIface {
			labels = append(labels, s.Iface)
		}
		if e.cfg.LatencyByCgroup {
			labels = append(labels, s.Cgroup)
		}
		sum := float64(s.Hist.Sum) / 1e9
		classic := cumulativeHistogram(e.latencyDesc, s.Hist.Buckets[:], latencyBounds[:], sum, labels)
		ch <- withNative(classic, nanosecondBuckets, s.Hist.Buckets[:], s.Hist.Count(), sum, labels)
	}
	return nil
}

// cumulativeHistogram converts per-bucket counts into a Prometheus
// histogram: cumulative counts per upper bound in seconds (the buckets
// beyond bounds count only in +Inf) and the sum, in seconds.
func cumulativeHistogram(desc *prometheus.Desc, perBucket []uint64, bounds []float64, sum float64, labels []string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(bounds))
	var cumulative uint64
	for i, le := range bounds {
		cumulative += perBucket[i]
		buckets[le] = cumulative
	}
	for _, n := range perBucket[len(bounds):] {
		cumulative += n
	}
	return prometheus.MustNewConstHistogram(desc, cumulative, sum, buckets, labels...)
}
