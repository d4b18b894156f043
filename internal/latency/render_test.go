// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/hist"
)

func TestRecordBucketsAreCumulativeFromFirstToLastNonEmpty(t *testing.T) {
	var h hist.Histogram
	h.Buckets[3], h.Buckets[5], h.Sum = 2, 1, 40
	r := NewRecord(time.Unix(0, 0), hist.Series{Hook: "ip-start", Hist: h})
	want := []Bucket{{8, 2}, {16, 2}, {32, 3}}
	if r.Count != 3 || r.SumNS != 40 || len(r.Buckets) != len(want) {
		t.Fatalf("record %+v", r)
	}
	for i, b := range want {
		if r.Buckets[i] != b {
			t.Errorf("bucket %d = %+v, want %+v", i, r.Buckets[i], b)
		}
	}
	if empty := NewRecord(time.Unix(0, 0), hist.Series{Hook: "ip-start"}); len(empty.Buckets) != 0 {
		t.Errorf("empty histogram has buckets %+v", empty.Buckets)
	}
}

// Grouped by process, every record carries pid and comm, pid 0 too (a hook
// outside any reading task); ungrouped, neither.
func TestRecordProcess(t *testing.T) {
	for _, tc := range []struct {
		s    hist.Series
		want string
	}{
		{hist.Series{Hook: "tcp-socket-read", PID: 42, Comm: "nginx"}, `"pid":42,"comm":"nginx"`},
		{hist.Series{Hook: "tcp-start", Comm: "-"}, `"pid":0,"comm":"-"`},
		{hist.Series{Hook: "tcp-start"}, `"hook":"tcp-start","count"`},
	} {
		var b bytes.Buffer
		if err := WriteJSON(&b, time.Unix(0, 0), []hist.Series{tc.s}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("%+v: %s lacks %s", tc.s, b.String(), tc.want)
		}
	}
}

func TestTextShowsRangesCountsAndAverage(t *testing.T) {
	var h hist.Histogram
	h.Buckets[0], h.Buckets[2], h.Buckets[hist.MaxSlot], h.Sum = 1, 3, 1, 20_000_000_010
	var b bytes.Buffer
	ts := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	if err := WriteText(&b, ts, []hist.Series{{Hook: "udp-socket-read", Iface: "eth0", Cgroup: "/x", Hist: h}}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"2026-11-30T08:00:00Z\n", "udp-socket-read, interface=eth0, cgroup=/x:\n",
		"[0, 1ns]", "(2ns, 4ns]", "(8.59s, inf)", "count: 5, average: 4s\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 2+hist.MaxSlot+1+1+1 {
		t.Errorf("%d lines, want a row per bucket from the first to the last non-empty one:\n%s", n, out)
	}
}

// A cgroup, interface or process named by a local user is escaped in text output.
func TestTextEscapesNames(t *testing.T) {
	var b bytes.Buffer
	var h hist.Histogram
	h.Buckets[1] = 1
	series := hist.Series{Hook: "tcp-socket-read", Iface: "v\x1b[2J", Cgroup: "/a\nb", PID: 42, Comm: "c\x1b]0;x\a", Hist: h}
	if err := WriteText(&b, time.Unix(0, 0), []hist.Series{series}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "\x1b") || strings.Contains(out, "\a") ||
		!strings.Contains(out, `interface=v\x1b[2J, cgroup=/a\nb, pid=42, comm=c\x1b]0;x\a:`) {
		t.Errorf("names not escaped:\n%q", out)
	}
}

// A sampled series says so in both formats; an unsampled one says nothing.
func TestSampledSeriesSaySo(t *testing.T) {
	var h hist.Histogram
	h.Buckets[3] = 2
	for _, tc := range []struct {
		every      uint32
		text, json string
	}{
		{10, "tcp-socket-read, sampled 1 in 10:\n", `"hook":"tcp-socket-read","sample_every":10,"count":2`},
		{0, "tcp-socket-read:\n", `"hook":"tcp-socket-read","count":2`},
	} {
		s := []hist.Series{{Hook: "tcp-socket-read", SampleEvery: tc.every, Hist: h}}
		var text, json bytes.Buffer
		if err := WriteText(&text, time.Unix(0, 0), s); err != nil {
			t.Fatal(err)
		}
		if err := WriteJSON(&json, time.Unix(0, 0), s); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text.String(), tc.text) || !strings.Contains(json.String(), tc.json) {
			t.Errorf("SampleEvery %d: text %q lacks %q, or JSON %q lacks %q", tc.every, text.String(), tc.text, json.String(), tc.json)
		}
	}
}

// TestIntervals: each read yields what was added since the previous one,
// per series (the same hook on two interfaces are two series), and a series
// seen for the first time counts from zero.
func TestIntervals(t *testing.T) {
	series := func(lo, eth uint64) []hist.Series {
		var a, b hist.Histogram
		a.Buckets[10], b.Buckets[20] = lo, eth
		return []hist.Series{{Hook: "tcp-start", Iface: "lo", Hist: a}, {Hook: "tcp-start", Iface: "eth0", Hist: b}}
	}
	var iv Intervals
	for i, tc := range []struct{ lo, eth, wantLo, wantEth uint64 }{
		{5, 0, 5, 0}, {5, 3, 0, 3}, {9, 3, 4, 0},
	} {
		got := iv.Next(series(tc.lo, tc.eth))
		if got[0].Hist.Count() != tc.wantLo || got[1].Hist.Count() != tc.wantEth || got[0].Iface != "lo" {
			t.Errorf("read %d: lo %d eth0 %d, want %d and %d", i, got[0].Hist.Count(), got[1].Hist.Count(), tc.wantLo, tc.wantEth)
		}
	}
}

// TestSummaryLines: one line per series with count, p50, p99 and max as
// bucket bounds, in text and JSON; an empty series says "-" (JSON: 0).
func TestSummaryLines(t *testing.T) {
	var h hist.Histogram
	h.Buckets[12], h.Buckets[14], h.Buckets[hist.MaxSlot] = 98, 1, 1 // 100 samples
	series := []hist.Series{{Hook: "tcp-socket-read", Iface: "lo", Hist: h}, {Hook: "udp-socket-read"}}
	var text bytes.Buffer
	if err := WriteSummaryText(&text, time.Unix(0, 0).UTC(), series); err != nil {
		t.Fatal(err)
	}
	want := "1970-01-01T00:00:00Z\n" +
		"PROBE                          COUNT  P50     P99      MAX\n" +
		"tcp-socket-read, interface=lo  100    ≤4.1us  ≤16.4us  >8.59s\n" +
		"udp-socket-read                0      -       -        -\n\n"
	if text.String() != want {
		t.Errorf("text summary:\n%s\nwant:\n%s", text.String(), want)
	}
	var js bytes.Buffer
	if err := WriteSummaryJSON(&js, time.Unix(0, 0).UTC(), series); err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"ts":"1970-01-01T00:00:00Z","hook":"tcp-socket-read","iface":"lo","count":100,"p50_ns":4096,"p99_ns":16384,"max_ns":17179869184}` + "\n" +
		`{"ts":"1970-01-01T00:00:00Z","hook":"udp-socket-read","count":0,"p50_ns":0,"p99_ns":0,"max_ns":0}` + "\n"
	if js.String() != wantJSON {
		t.Errorf("JSON summary:\n%s\nwant:\n%s", js.String(), wantJSON)
	}
}
