// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"maps"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
)

// nativeBuckets expands a native histogram's spans and deltas into counts
// per bucket index.
func nativeBuckets(h *dto.Histogram) map[int]uint64 {
	out := map[int]uint64{}
	idx, i := 0, 0
	var count int64
	for _, s := range h.GetPositiveSpan() {
		idx += int(s.GetOffset())
		for range s.GetLength() {
			count += h.GetPositiveDelta()[i]
			if count != 0 {
				out[idx] = uint64(count)
			}
			idx++
			i++
		}
	}
	return out
}

// family gathers c and returns the metric family name.
func family(t *testing.T, c prometheus.Collector, name string) *dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("no %s", name)
	return nil
}

func histogramOf(t *testing.T, c prometheus.Collector, name string) *dto.Histogram {
	t.Helper()
	return family(t, c, name).GetMetric()[0].GetHistogram()
}

// The latency and RTT histograms carry native buckets of schema 0 besides the
// classic ones: kernel bucket (2^(k-1), 2^k] ns in native bucket k-30, i.e.
// (2^(k-31), 2^(k-30)] s; the first bucket as the zero bucket (threshold
// 2^-30 s, the first bound scaled alike), the clamping last one in bucket 4.
// Expectations written from the bucket definitions, not from the code.
func TestNativeBuckets(t *testing.T) {
	s := series("tcp-socket-read", "", "", map[int]uint64{0: 1, 1: 2, 10: 3, 34: 5}, 987654321)
	h := histogramOf(t, New(Config{Latency: &fakeLatency{series: []hist.Series{s}}}), "netstack_latency_seconds")
	if h.GetSchema() != 0 || h.GetZeroThreshold() != math.Ldexp(1, -30) || h.GetZeroCount() != 1 {
		t.Errorf("schema %d, zero threshold %v, zero count %d; want 0, 2^-30, 1", h.GetSchema(), h.GetZeroThreshold(), h.GetZeroCount())
	}
	if got, want := nativeBuckets(h), map[int]uint64{-29: 2, -20: 3, 4: 5}; !maps.Equal(got, want) {
		t.Errorf("native buckets %v, want %v", got, want)
	}
	if h.GetSampleCount() != 11 || h.GetSampleSum() != 0.987654321 || len(h.GetBucket()) != hist.MaxSlot {
		t.Errorf("count %d sum %v, %d classic buckets; want 11, 0.987654321, %d", h.GetSampleCount(), h.GetSampleSum(), len(h.GetBucket()), hist.MaxSlot)
	}

	// RTT: 8 µs doubling; 5 µs in the first bucket (zero bucket, threshold
	// 2^-17 s), 100 µs in (64, 128] µs = native bucket 3+4-20, 10 s above
	// every bound = native bucket 3+20-20.
	c := NewConnections(0)
	r := tcp(1000, conn.Update, 1, 1)
	for _, us := range []uint32{5, 100, 10_000_000} {
		r.RTTus = us
		c.Add(snap(0, r))
	}
	h = histogramOf(t, connExporter(c), "stacktop_tcp_rtt_seconds")
	if h.GetZeroThreshold() != math.Ldexp(1, -17) || h.GetZeroCount() != 1 {
		t.Errorf("RTT zero threshold %v count %d; want 2^-17, 1", h.GetZeroThreshold(), h.GetZeroCount())
	}
	if got, want := nativeBuckets(h), map[int]uint64{-13: 1, 3: 1}; !maps.Equal(got, want) {
		t.Errorf("RTT native buckets %v, want %v", got, want)
	}
}

// --compat ebpf_exporter stays exactly ebpf_exporter's: no native buckets,
// which a Prometheus with native histograms on would ingest instead of the
// classic ones netstacklat's dashboards query.
func TestCompatHasNoNativeBuckets(t *testing.T) {
	s := series("tcp-socket-read", "", "", map[int]uint64{3: 1}, 5)
	h := histogramOf(t, New(Config{Latency: &fakeLatency{series: []hist.Series{s}}, CompatEbpfExporter: true}),
		"ebpf_exporter_netstack_latency_seconds")
	if h.Schema != nil || h.GetZeroThreshold() != 0 || len(h.GetPositiveSpan()) != 0 {
		t.Errorf("compat histogram has native fields: %v", h)
	}
}
