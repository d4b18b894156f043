// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/latency"
)

// fakeLatency stands in for the BPF maps with known contents.
type fakeLatency struct {
	series   []hist.Series
	counters []latency.Counter
	err      error
}

func (f *fakeLatency) Read() ([]hist.Series, error)         { return f.series, f.err }
func (f *fakeLatency) Counters() ([]latency.Counter, error) { return f.counters, f.err }

func series(hook, iface, cgroup string, buckets map[int]uint64, sum uint64) hist.Series {
	s := hist.Series{Hook: hook, Iface: iface, Cgroup: cgroup}
	for i, c := range buckets {
		s.Hist.Buckets[i] = c
	}
	s.Hist.Sum = sum
	return s
}

// The golden files were computed outside Go from the bucket definition
// (bucket i ends at 2^i ns; the clamping last bucket only reaches +Inf), so
// they check the conversion rather than repeat it.
func TestLatencyGolden(t *testing.T) {
	cases := []struct {
		golden          string
		byIface, byCgrp bool
		series          []hist.Series
	}{
		{"testdata/latency.golden", false, false, []hist.Series{
			series("tcp-socket-read", "", "", map[int]uint64{0: 1, 1: 2, 10: 3, 33: 4, 34: 5}, 123456789012),
			series("udp-socket-read", "", "", nil, 0),
		}},
		{"testdata/latency_grouped.golden", true, true, []hist.Series{
			series("tcp-start", "eth0", "/system.slice/nginx.service", map[int]uint64{20: 7}, 7000000),
			series("tcp-start", "lo", "/", map[int]uint64{3: 1}, 5),
		}},
	}
	for _, c := range cases {
		t.Run(c.golden, func(t *testing.T) {
			e := New(Config{Latency: &fakeLatency{series: c.series}, LatencyByIface: c.byIface, LatencyByCgroup: c.byCgrp})
			want, err := os.Open(c.golden)
			if err != nil {
				t.Fatal(err)
			}
			defer want.Close()
			if err := testutil.CollectAndCompare(e, want, "netstack_latency_seconds"); err != nil {
				t.Error(err)
			}
		})
	}
}

// What happened to each packet a hook saw is exported as is; packets dropped
// for want of a histogram slot are also the latency source's map-full count.
func TestLatencyPacketOutcomes(t *testing.T) {
	e := New(Config{Latency: &fakeLatency{counters: []latency.Counter{
		{Hook: "tcp-socket-read", Reason: "recorded", Count: 10},
		{Hook: "tcp-socket-read", Reason: "hist_full", Count: 2},
		{Hook: "udp-start", Reason: "hist_full", Count: 3},
		{Hook: "udp-start", Reason: "no_stamp", Count: 7},
	}}})
	compare(t, e, `
# HELP stacktop_latency_packets_total Packets each latency hook saw, by outcome: recorded, or the reason they were not (see docs/METRICS.md).
# TYPE stacktop_latency_packets_total counter
stacktop_latency_packets_total{hook="tcp-socket-read",reason="recorded"} 10
stacktop_latency_packets_total{hook="tcp-socket-read",reason="hist_full"} 2
stacktop_latency_packets_total{hook="udp-start",reason="hist_full"} 3
stacktop_latency_packets_total{hook="udp-start",reason="no_stamp"} 7
# HELP stacktop_map_full_total Kernel-side updates dropped because a BPF map was full.
# TYPE stacktop_map_full_total counter
stacktop_map_full_total{source="latency"} 5
`, "stacktop_latency_packets_total", "stacktop_map_full_total")
}

// A failing source must not fail the scrape: its error shows up as
// stacktop_scrape_error{source="latency"} 1 and everything else is served.
func TestLatencyReadErrorIsReported(t *testing.T) {
	e := New(Config{Latency: &fakeLatency{err: errors.New("map gone")}, Version: "v1", Revision: "abc"})
	want := `
# HELP stacktop_scrape_error 1 if the last scrape could not read the source (the error is logged), else 0.
# TYPE stacktop_scrape_error gauge
stacktop_scrape_error{source="bpf_programs"} 0
stacktop_scrape_error{source="latency"} 1
`
	if err := testutil.CollectAndCompare(e, strings.NewReader(want), "stacktop_scrape_error"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(e, "stacktop_build_info"); n != 1 {
		t.Errorf("build info series: %d, want 1", n)
	}
}

// The nic probe's conversion error is a gauge per stamping interface, in
// seconds.
func TestNICClockError(t *testing.T) {
	e := New(Config{Latency: &fakeLatency{}, NICClocks: func() []latency.NICClock {
		return []latency.NICClock{{Interface: "eth1", PHC: 2, ErrorNs: 1500}, {Interface: "eth2", PHC: 2, ErrorNs: 1500}}
	}})
	want := `# HELP stacktop_latency_nic_clock_error_seconds Bound on the error of the nic probe's conversion of an interface's hardware stamps (PHC time) to the system clock, until the next refresh: a nic sample may be off by as much.
# TYPE stacktop_latency_nic_clock_error_seconds gauge
stacktop_latency_nic_clock_error_seconds{iface="eth1",phc="/dev/ptp2"} 1.5e-06
stacktop_latency_nic_clock_error_seconds{iface="eth2",phc="/dev/ptp2"} 1.5e-06
`
	if err := testutil.CollectAndCompare(e, strings.NewReader(want), "stacktop_latency_nic_clock_error_seconds"); err != nil {
		t.Error(err)
	}
}
