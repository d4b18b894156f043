// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/termsafe"
)

// barWidth is the width of the histogram bars in text output.
const barWidth = 40

// WriteText prints, like netstacklat, a timestamp and for every series its
// non-empty bucket range as rows of interval, count and bar, then count and
// average.
func WriteText(w io.Writer, ts time.Time, series []hist.Series) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", ts.Format(time.RFC3339))
	for _, s := range series {
		b.WriteString(SeriesName(s))
		b.WriteString(":\n")
		writeBuckets(&b, &s.Hist)
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// SeriesName is the probe and the labels a series is reported under, as
// the text reports head it: "tcp-socket-read, interface=lo".
func SeriesName(s hist.Series) string {
	var b strings.Builder
	b.WriteString(s.Hook)
	if s.Iface != "" {
		fmt.Fprintf(&b, ", interface=%s", termsafe.String(s.Iface))
	}
	if s.Cgroup != "" {
		fmt.Fprintf(&b, ", cgroup=%s", termsafe.String(s.Cgroup))
	}
	if s.Comm != "" {
		fmt.Fprintf(&b, ", pid=%d, comm=%s", s.PID, termsafe.String(s.Comm))
	}
	if s.SampleEvery > 1 {
		fmt.Fprintf(&b, ", sampled 1 in %d", s.SampleEvery)
	}
	return b.String()
}

// WriteSummaryText prints a timestamp and one line per series: its count,
// p50, p99 and largest value. A log2 histogram knows only the bucket of
// each, so each is the bucket's upper bound ("≤"), or above the top
// bucket's lower bound (">") for the bucket that holds every larger value.
func WriteSummaryText(w io.Writer, ts time.Time, series []hist.Series) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", ts.Format(time.RFC3339))
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROBE\tCOUNT\tP50\tP99\tMAX")
	for _, s := range series {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", SeriesName(s), s.Hist.Count(),
			SlotText(s.Hist.QuantileSlot(0.5)), SlotText(s.Hist.QuantileSlot(0.99)), SlotText(s.Hist.QuantileSlot(1)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// SlotText is what a quantile in bucket slot is known to be: "≤4.1us",
// ">8.59s" in the top bucket, "-" without samples (slot -1).
func SlotText(slot int) string {
	switch slot {
	case -1:
		return "-"
	case hist.MaxSlot:
		return ">" + siNanos(float64(hist.UpperBound(slot-1)))
	}
	return "≤" + siNanos(float64(hist.UpperBound(slot)))
}

func writeBuckets(b *strings.Builder, h *hist.Histogram) {
	first, last, peak := -1, -1, uint64(0)
	for i, c := range h.Buckets {
		if c > 0 {
			if first < 0 {
				first = i
			}
			last = i
			peak = max(peak, c)
		}
	}
	for i := max(first, 0); i <= last; i++ {
		c := h.Buckets[i]
		bar := int((c*barWidth + peak/2) / peak)
		fmt.Fprintf(b, "%-18s %10d |%-*s|\n", bucketRange(i), c, barWidth, strings.Repeat("@", bar))
	}
	n := h.Count()
	if n == 0 {
		b.WriteString("count: 0, average: -\n")
		return
	}
	fmt.Fprintf(b, "count: %d, average: %s\n", n, siNanos(float64(h.Sum)/float64(n)))
}

// bucketRange labels bucket i: [0, 1ns] for the first, (2^(i-1), 2^i] after,
// and an open end for the top bucket, which holds everything above.
func bucketRange(i int) string {
	switch {
	case i == 0:
		return "[0, 1ns]"
	case i == hist.MaxSlot:
		return fmt.Sprintf("(%s, inf)", siNanos(float64(hist.UpperBound(i-1))))
	}
	return fmt.Sprintf("(%s, %s]", siNanos(float64(hist.UpperBound(i-1))), siNanos(float64(hist.UpperBound(i))))
}

func siNanos(ns float64) string {
	units := []string{"ns", "us", "ms", "s"}
	u := 0
	for ns >= 1000 && u < len(units)-1 {
		ns /= 1000
		u++
	}
	return fmt.Sprintf("%.3g%s", ns, units[u])
}

// Record is the JSON form of one series at one report (docs/LATENCY.md, "JSON"): counts
// are cumulative since start, and each bucket's count is cumulative over the
// buckets below it too, as Prometheus' le buckets are. Buckets run from the
// first to the last non-empty one; the top bucket (le_ns 2^34) also holds
// every larger value.
type Record struct {
	TS time.Time `json:"ts"`
	Labels
	Count   uint64   `json:"count"`
	SumNS   uint64   `json:"sum_ns"`
	Buckets []Bucket `json:"buckets"`
}

// Labels say which series a record is of.
type Labels struct {
	Hook   string  `json:"hook"`
	Iface  string  `json:"iface,omitempty"`
	Netns  uint64  `json:"netns,omitempty"` // the interface's namespace inode, grouped by interface with -n -1 only
	Cgroup string  `json:"cgroup,omitempty"`
	PID    *uint32 `json:"pid,omitempty"` // grouped by process only (0: no reading task)
	Comm   string  `json:"comm,omitempty"`
	// SampleEvery, when present: Count is of a random 1 in SampleEvery
	// packets (--sample).
	SampleEvery uint32 `json:"sample_every,omitempty"`
}

func labelsOf(s hist.Series) Labels {
	l := Labels{Hook: s.Hook, Iface: s.Iface, Netns: s.Netns, Cgroup: s.Cgroup, Comm: s.Comm, SampleEvery: s.SampleEvery}
	if s.Comm != "" {
		l.PID = &s.PID
	}
	return l
}

// SummaryRecord is the JSON form of one series' summary line (--summary):
// p50, p99 and max are upper bounds of their log2 buckets in ns, and the
// top bucket's 2^34 stands for every larger value; all are 0 without
// samples.
type SummaryRecord struct {
	TS time.Time `json:"ts"`
	Labels
	Count uint64 `json:"count"`
	P50NS uint64 `json:"p50_ns"`
	P99NS uint64 `json:"p99_ns"`
	MaxNS uint64 `json:"max_ns"`
}

// WriteSummaryJSON prints one SummaryRecord per series and line.
func WriteSummaryJSON(w io.Writer, ts time.Time, series []hist.Series) error {
	bound := func(slot int) uint64 {
		if slot < 0 {
			return 0
		}
		return hist.UpperBound(slot)
	}
	enc := json.NewEncoder(w)
	for _, s := range series {
		h := &s.Hist
		r := SummaryRecord{TS: ts, Labels: labelsOf(s), Count: h.Count(),
			P50NS: bound(h.QuantileSlot(0.5)), P99NS: bound(h.QuantileSlot(0.99)), MaxNS: bound(h.QuantileSlot(1))}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// Bucket is one cumulative bucket: Count values were <= LeNS.
type Bucket struct {
	LeNS  uint64 `json:"le_ns"`
	Count uint64 `json:"count"`
}

// NewRecord converts a series to its JSON form.
func NewRecord(ts time.Time, s hist.Series) Record {
	r := Record{TS: ts, Labels: labelsOf(s), Count: s.Hist.Count(), SumNS: s.Hist.Sum, Buckets: []Bucket{}}
	var cum uint64
	for i, c := range s.Hist.Buckets {
		cum += c
		if cum > 0 && (c > 0 || cum < r.Count) {
			r.Buckets = append(r.Buckets, Bucket{LeNS: hist.UpperBound(i), Count: cum})
		}
		if cum == r.Count && c > 0 {
			break
		}
	}
	return r
}

// WriteJSON prints one JSON object per series and line.
func WriteJSON(w io.Writer, ts time.Time, series []hist.Series) error {
	enc := json.NewEncoder(w)
	for _, s := range series {
		if err := enc.Encode(NewRecord(ts, s)); err != nil {
			return err
		}
	}
	return nil
}
