// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"fmt"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
)

// BenchmarkScrape measures one scrape of a busy host as Prometheus sees it:
// gathering and encoding 7 hooks × 8 interfaces × 4 cgroups of latency
// histograms and 5000 live connections of 100 processes in 10 cgroups.
func BenchmarkScrape(b *testing.B) {
	var series []hist.Series
	for h := range 7 {
		for i := range 8 {
			for c := range 4 {
				series = append(series, busySeries(fmt.Sprintf("hook-%d", h), fmt.Sprintf("eth%d", i), fmt.Sprintf("/pod-%d", c)))
			}
		}
	}
	conns := NewConnections(0)
	var recs []conn.Record
	for i := range 5000 {
		recs = append(recs, conn.Record{
			Event: conn.Update, Proto: "tcp", Family: 4, State: "ESTABLISHED",
			LocalAddr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), LocalPort: 443,
			RemoteAddr: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), RemotePort: uint16(30000 + i),
			Comm: fmt.Sprintf("proc-%d", i%100), Cgroup: fmt.Sprintf("/pod-%d", i%10),
			BytesIn: uint64(i) * 1000, BytesOut: uint64(i) * 10, RTTus: uint32(i % 5000),
		})
	}
	conns.Add(conn.Snapshot{Time: time.Now(), Records: recs})
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(Config{
		Latency: &fakeLatency{series: series}, LatencyByIface: true, LatencyByCgroup: true,
		Connections: conns, BPFStatsEnabled: func() bool { return false },
	}))
	b.ReportAllocs()
	for b.Loop() {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeOpenMetrics))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAddSnapshot measures folding one snapshot of 5000 connections
// into the aggregates (once per --interval).
func BenchmarkAddSnapshot(b *testing.B) {
	c := NewConnections(0)
	recs := make([]conn.Record, 5000)
	for i := range recs {
		recs[i] = tcp(uint16(i), conn.Update, uint64(i), uint64(i))
		recs[i].Comm = fmt.Sprintf("proc-%d", i%100)
	}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		for i := range recs {
			recs[i].BytesIn += 100
		}
		now = now.Add(time.Second)
		c.Add(conn.Snapshot{Time: now, Records: recs})
	}
}

func busySeries(hook, iface, cgroup string) hist.Series {
	return series(hook, iface, cgroup, map[int]uint64{10: 5, 12: 100, 15: 7, 20: 1}, 1_000_000)
}
