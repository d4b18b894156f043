// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
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
		b.WriteString(":\n")
		writeBuckets(&b, &s.Hist)
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
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
	TS     time.Time `json:"ts"`
	Hook   string    `json:"hook"`
	Iface  string    `json:"iface,omitempty"`
	Netns  uint64    `json:"netns,omitempty"` // the interface's namespace inode, grouped by interface with -n -1 only
	Cgroup string    `json:"cgroup,omitempty"`
	PID    *uint32   `json:"pid,omitempty"` // grouped by process only (0: no reading task)
	Comm   string    `json:"comm,omitempty"`
	// SampleEvery, when present: Count is of a random 1 in SampleEvery
	// packets (--sample).
	SampleEvery uint32   `json:"sample_every,omitempty"`
	Count       uint64   `json:"count"`
	SumNS       uint64   `json:"sum_ns"`
	Buckets     []Bucket `json:"buckets"`
}

// Bucket is one cumulative bucket: Count values were <= LeNS.
type Bucket struct {
	LeNS  uint64 `json:"le_ns"`
	Count uint64 `json:"count"`
}

// NewRecord converts a series to its JSON form.
func NewRecord(ts time.Time, s hist.Series) Record {
	r := Record{TS: ts, Hook: s.Hook, Iface: s.Iface, Netns: s.Netns, Cgroup: s.Cgroup, Comm: s.Comm, SampleEvery: s.SampleEvery, Count: s.Hist.Count(),
		SumNS: s.Hist.Sum, Buckets: []Bucket{}}
	if s.Comm != "" {
		r.PID = &s.PID
	}
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
