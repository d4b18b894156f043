package exporter

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stacktop/stacktop/internal/hist"
)

// fakeLatency stands in for the BPF maps with known contents.
type fakeLatency struct {
	series []hist.Series
	err    error
}

func (f *fakeLatency) Read() ([]hist.Series, error) { return f.series, f.err }

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
