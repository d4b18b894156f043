// SPDX-License-Identifier: Apache-2.0

package hist

import "testing"

func TestSlotBoundaries(t *testing.T) {
	cases := []struct {
		ns   uint64
		slot int
	}{
		{0, 0}, {1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {8, 3}, {9, 4},
		{1 << 20, 20}, {1<<20 + 1, 21}, {1 << 34, 34}, {1<<34 + 1, 34}, {^uint64(0), 34},
	}
	for _, c := range cases {
		if got := Slot(c.ns); got != c.slot {
			t.Errorf("Slot(%d) = %d, want %d", c.ns, got, c.slot)
		}
		if c.slot < MaxSlot && c.ns > UpperBound(c.slot) {
			t.Errorf("%d ns above upper bound %d of its slot %d", c.ns, UpperBound(c.slot), c.slot)
		}
	}
}

func TestAddAndCount(t *testing.T) {
	var a, b Histogram
	a.Buckets[3], a.Sum = 2, 14
	b.Buckets[3], b.Buckets[34], b.Sum = 1, 5, 100
	a.Add(&b)
	if a.Count() != 8 || a.Sum != 114 || a.Buckets[3] != 3 {
		t.Fatalf("after Add: count %d sum %d bucket3 %d", a.Count(), a.Sum, a.Buckets[3])
	}
}

// Read-wait quantiles are bucket bounds, or the max when that is lower (it
// lies in the same bucket); the max stands in for the last bucket's missing
// bound; a max the kernel missed (below the highest bucket with samples)
// is replaced by that bucket's bound. Expectations from the definitions.
func TestWaitQuantiles(t *testing.T) {
	wait := func(maxNs uint64, buckets map[int]uint64) *Wait {
		w := &Wait{MaxNs: maxNs}
		for j, n := range buckets {
			w.Buckets[j] = n
		}
		return w
	}
	for _, tc := range []struct {
		name          string
		w             *Wait
		p50, p99, max uint64
	}{
		{"no samples", wait(0, nil), 0, 0, 0},
		{"one bucket, max inside it", wait(20_000, map[int]uint64{5: 100}), 20_000, 20_000, 20_000},
		{"the tail above p99", wait(120_000_000, map[int]uint64{2: 99, 17: 1}), 4096, 4096, 120_000_000},
		{"25 samples: p99 is the largest", wait(120_000_000, map[int]uint64{3: 24, 17: 1}), 8192, 120_000_000, 120_000_000},
		{"p99 below the max's bucket", wait(120_000_000, map[int]uint64{3: 50, 10: 49, 17: 1}), 8192, 1 << 20, 120_000_000},
		{"max missed", wait(0, map[int]uint64{17: 2}), 1 << 27, 1 << 27, 1 << 27},
		{"last bucket, no bound", wait(30_000_000_000, map[int]uint64{WaitBuckets - 1: 1}), 30_000_000_000, 30_000_000_000, 30_000_000_000},
		{"sub-microsecond", wait(300, map[int]uint64{0: 4}), 300, 300, 300},
	} {
		if p50, p99, m := tc.w.Quantile(0.5), tc.w.Quantile(0.99), tc.w.Max(); p50 != tc.p50 || p99 != tc.p99 || m != tc.max {
			t.Errorf("%s: p50 %d, p99 %d, max %d; want %d, %d, %d", tc.name, p50, p99, m, tc.p50, tc.p99, tc.max)
		}
	}
	if WaitUpperBound(0) != 1024 || WaitUpperBound(WaitBuckets-1) != UpperBound(MaxSlot) {
		t.Errorf("wait bounds %d … %d, want 2^10 … 2^%d ns", WaitUpperBound(0), WaitUpperBound(WaitBuckets-1), MaxSlot)
	}
}

// TestSince: the difference of two reads of one series, and all of the
// newer read when the series was created again in between.
func TestSince(t *testing.T) {
	var before, after Histogram
	before.Buckets[3], before.Buckets[10], before.Sum = 2, 1, 520
	after.Buckets[3], after.Buckets[10], after.Buckets[20], after.Sum = 5, 1, 4, 1_049_620
	d := after.Since(&before)
	if d.Buckets[3] != 3 || d.Buckets[10] != 0 || d.Buckets[20] != 4 || d.Count() != 7 || d.Sum != 1_049_100 {
		t.Errorf("after.Since(before) = %v sum %d", d.Buckets, d.Sum)
	}
	var recreated Histogram
	recreated.Buckets[3], recreated.Sum = 1, 5
	if d := recreated.Since(&before); d != recreated {
		t.Errorf("a series that went down must count from zero: %v", d.Buckets)
	}
}

// TestQuantileSlot: the bucket of the sample of rank ⌈q·count⌉, counted by
// hand over 100 samples: 50 in bucket 4, 49 in bucket 12, 1 in bucket 30.
func TestQuantileSlot(t *testing.T) {
	var h Histogram
	if got := h.QuantileSlot(0.5); got != -1 {
		t.Fatalf("empty histogram: slot %d, want -1", got)
	}
	h.Buckets[4], h.Buckets[12], h.Buckets[30] = 50, 49, 1
	for _, tc := range []struct {
		q    float64
		want int
	}{{0.5, 4}, {0.51, 12}, {0.99, 12}, {0.995, 30}, {1, 30}} {
		if got := h.QuantileSlot(tc.q); got != tc.want {
			t.Errorf("QuantileSlot(%g) = %d, want %d", tc.q, got, tc.want)
		}
	}
}
