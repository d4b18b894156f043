// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Native histograms. stacktop's histograms have log2 buckets, which are
// native histogram buckets of schema 0 (one bucket per power of two) — but
// in nanoseconds or microseconds, while native bucket boundaries are powers
// of two in the exported unit, seconds, and 10^-9 and 10^-6 are no powers of
// two. Each bucket is therefore exported in the native bucket whose bounds
// are its own scaled by 2^⌊log2 unit⌋ / unit: 0.9313 for nanoseconds (bucket
// (512, 1024] ns becomes (2^-21, 2^-20] s = (476.8, 953.7] ns), 0.9537 for
// microseconds. Counts and sums are exact; a native quantile is the classic
// one times that factor. The first bucket, which also holds everything
// below it, becomes the zero bucket; the clamping last one, one more bucket.

// log2Layout says where a histogram's buckets lie: bucket j ends at
// 2^(firstExp+j) units, and unit is 2^unitExp seconds scaled as above.
type log2Layout struct {
	firstExp int
	unitExp  int // ⌊log2 unit⌋: -30 for nanoseconds, -20 for microseconds
}

var (
	nanosecondBuckets = log2Layout{firstExp: 0, unitExp: -30}
	rttBuckets        = log2Layout{firstExp: 3, unitExp: -20} // 8 µs doubling
)

// withNative returns classic (a const histogram) with the native buckets
// of the same counts added, for scrapers that negotiate them (protobuf);
// the text formats carry only the classic buckets. perBucket are the
// counts of the buckets in order, the last one above every classic bound.
func withNative(classic prometheus.Metric, l log2Layout, perBucket []uint64, count uint64, sum float64, labels []string) prometheus.Metric {
	positive := map[int]int64{}
	for j, n := range perBucket[1:] {
		if n > 0 {
			positive[l.firstExp+j+1+l.unitExp] = int64(n)
		}
	}
	zeroThreshold := math.Ldexp(1, l.firstExp+l.unitExp) // the first bucket's bound, scaled
	native, err := prometheus.NewConstNativeHistogram(classic.Desc(), count, sum, positive, nil,
		perBucket[0], 0, zeroThreshold, time.Time{}, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(classic.Desc(), err)
	}
	return bothLayouts{classic, native}
}

// bothLayouts is one histogram with its classic and its native buckets.
type bothLayouts struct{ classic, native prometheus.Metric }

func (b bothLayouts) Desc() *prometheus.Desc { return b.classic.Desc() }

func (b bothLayouts) Write(out *dto.Metric) error {
	if err := b.classic.Write(out); err != nil {
		return err
	}
	var n dto.Metric
	if err := b.native.Write(&n); err != nil {
		return err
	}
	h, nh := out.Histogram, n.Histogram
	h.Schema, h.ZeroThreshold, h.ZeroCount = nh.Schema, nh.ZeroThreshold, nh.ZeroCount
	h.PositiveSpan, h.PositiveDelta = nh.PositiveSpan, nh.PositiveDelta
	return nil
}
