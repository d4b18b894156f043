// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"maps"
	"math"
	"testing"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
)

// waitOf is a read-wait histogram with counts per bucket and a sum.
func waitOf(sum uint64, buckets map[int]uint64) *hist.Wait {
	w := &hist.Wait{SumNs: sum}
	for j, n := range buckets {
		w.Buckets[j] = n
	}
	return w
}

// stacktop_read_wait_seconds sums, per (comm, cgroup, proto), each
// socket's read wait once per snapshot: the two UDP flows of one socket
// share its histogram (and cookie) and add it once; two snapshots add up.
// Buckets: read-wait bucket j ends at 2^(j+10) ns, so 2^(j+10)·1e-9 s
// classic, native bucket j+10-30 (the first as the zero bucket).
func TestReadWaitPerProcess(t *testing.T) {
	c := NewConnections(0)
	c.ExportReadWait()
	e := connExporter(c)
	udpSocket := waitOf(3_000_000, map[int]uint64{0: 1, 2: 2})
	flow := func(rport uint16) conn.Record {
		r := tcp(53, conn.Update, 10, 10)
		r.Proto, r.State, r.RemotePort, r.Comm = "udp", "UDP", rport, "dns"
		r.Cookie, r.ReadWait = 7, udpSocket
		return r
	}
	slow := tcp(1000, conn.Update, 1, 1)
	slow.Cookie, slow.ReadWait = 8, waitOf(200_000_000, map[int]uint64{17: 1})
	idle := tcp(1001, conn.Update, 1, 1) // no reads this refresh
	idle.Cookie = 9
	c.Add(snap(0, flow(40000), flow(40001), slow, idle))
	c.Add(snap(1, slow))
	got := map[string][3]float64{} // comm/proto: count, sum, count at or below 2^12 ns
	for _, m := range family(t, e, "stacktop_read_wait_seconds").GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		h := m.GetHistogram()
		got[labels["comm"]+"/"+labels["proto"]] = [3]float64{float64(h.GetSampleCount()), h.GetSampleSum(),
			float64(h.GetBucket()[2].GetCumulativeCount())}
		if h.GetBucket()[2].GetUpperBound() != 4.096e-6 {
			t.Errorf("third bucket ends at %v, want 2^12 ns", h.GetBucket()[2].GetUpperBound())
		}
	}
	want := map[string][3]float64{"curl/tcp": {2, 0.4, 0}, "dns/udp": {3, 0.003, 3}}
	if !maps.Equal(got, want) {
		t.Errorf("per aggregate (count, sum, count ≤ 4.096 µs): %v, want %v", got, want)
	}
}

// The bucket layout, classic and native.
func TestReadWaitBuckets(t *testing.T) {
	c := NewConnections(0)
	c.ExportReadWait()
	r := tcp(1000, conn.Update, 1, 1)
	r.Cookie, r.ReadWait = 1, waitOf(5, map[int]uint64{0: 1, 1: 2, 17: 3, hist.WaitBuckets - 1: 4})
	c.Add(snap(0, r))
	h := histogramOf(t, connExporter(c), "stacktop_read_wait_seconds")
	if len(h.GetBucket()) != hist.WaitBuckets-1 || h.GetBucket()[0].GetUpperBound() != 1.024e-6 ||
		h.GetBucket()[hist.WaitBuckets-2].GetUpperBound() != 8.589934592 {
		t.Errorf("classic buckets %v: want %d, from 2^10 ns to 2^33 ns", h.GetBucket(), hist.WaitBuckets-1)
	}
	if h.GetZeroThreshold() != math.Ldexp(1, -20) || h.GetZeroCount() != 1 || h.GetSampleCount() != 10 {
		t.Errorf("zero threshold %v, zero count %d, count %d; want 2^-20, 1, 10", h.GetZeroThreshold(), h.GetZeroCount(), h.GetSampleCount())
	}
	if got, want := nativeBuckets(h), map[int]uint64{-19: 2, -3: 3, 4: 4}; !maps.Equal(got, want) {
		t.Errorf("native buckets %v, want %v", got, want)
	}
}

// Without ExportReadWait (serve's default) nothing is exported, whatever
// the records carry.
func TestReadWaitNotExportedByDefault(t *testing.T) {
	c := NewConnections(0)
	r := tcp(1000, conn.Update, 1, 1)
	r.Cookie, r.ReadWait = 1, waitOf(5, map[int]uint64{3: 1})
	c.Add(snap(0, r))
	compare(t, connExporter(c), "", "stacktop_read_wait_seconds")
}
