// SPDX-License-Identifier: Apache-2.0

// Package hist defines the log2 latency histograms shared by the BPF
// programs and every consumer, with ebpf_exporter's exp2 semantics so the
// same data feeds Prometheus unchanged.
package hist

import "math"

// MaxSlot is the highest bucket index; values above 2^MaxSlot ns (~17 s) are
// clamped into it.
const MaxSlot = 34

// NBuckets is the number of buckets; the BPF maps hold one more slot, the sum.
const NBuckets = MaxSlot + 1

// Histogram holds per-bucket (not cumulative) counts: bucket 0 counts values
// of 0 and 1 ns, bucket i > 0 counts values in (2^(i-1), 2^i] ns.
type Histogram struct {
	Buckets [NBuckets]uint64
	Sum     uint64 // sum of all recorded values, ns
}

// Slot returns the bucket a value in ns falls into.
func Slot(ns uint64) int {
	if ns <= 1 {
		return 0
	}
	s := 0
	for v := ns - 1; v > 0; v >>= 1 {
		s++
	}
	return min(s, MaxSlot)
}

// UpperBound returns the inclusive upper bound of bucket i in ns.
func UpperBound(i int) uint64 { return uint64(1) << i }

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return total(h.Buckets[:]) }

func total(buckets []uint64) uint64 {
	var n uint64
	for _, c := range buckets {
		n += c
	}
	return n
}

// Since returns what h recorded after prev was read from the same series:
// h - prev, bucket by bucket. A series whose counts went down was removed
// and created again in between (its map entry evicted), so all of h is new.
func (h *Histogram) Since(prev *Histogram) Histogram {
	d := *h
	for i, c := range prev.Buckets {
		if h.Buckets[i] < c {
			return *h
		}
		d.Buckets[i] -= c
	}
	d.Sum -= min(prev.Sum, h.Sum)
	return d
}

// QuantileSlot returns the bucket holding the sample of rank ⌈q·count⌉
// (0 < q ≤ 1; q = 1 is the highest non-empty bucket), or -1 without
// samples. A log2 histogram knows no more than that bucket: the quantile
// is at most its UpperBound, and above UpperBound(slot-1).
func (h *Histogram) QuantileSlot(q float64) int { return rankSlot(h.Buckets[:], q) }

// rankSlot is the index of the bucket holding the sample of rank
// ⌈q·count⌉, or -1 when the buckets are empty.
func rankSlot(buckets []uint64, q float64) int {
	n := total(buckets)
	if n == 0 {
		return -1
	}
	rank := min(max(uint64(math.Ceil(q*float64(n))), 1), n)
	var seen uint64
	for i, c := range buckets {
		seen += c
		if seen >= rank {
			return i
		}
	}
	return len(buckets) - 1 // not reached
}

// Add merges o into h (used to sum per-CPU copies).
func (h *Histogram) Add(o *Histogram) {
	for i, c := range o.Buckets {
		h.Buckets[i] += c
	}
	h.Sum += o.Sum
}

// Series is one histogram with the labels it is reported under; Iface,
// Cgroup and Comm are empty unless grouping by them is on. Ifindex and
// CgroupID are what the kernel reported them as (0 when not grouped), for
// exports that name them their own way. PID and Comm name the reading
// process; grouped by process, hooks outside a reading task have PID 0 and
// Comm "-". Netns is the inode of the interface's namespace when grouping
// by interface across namespaces, else 0.
type Series struct {
	Hook     string
	Iface    string
	Netns    uint64
	Cgroup   string
	PID      uint32
	Comm     string
	Ifindex  uint32
	CgroupID uint64
	Hist     Histogram
	// SampleEvery, above 1: Hist counts a random 1 in SampleEvery of the
	// packets (stacktop latency --sample), not all of them.
	SampleEvery uint32
}

// Read wait per socket (internal/latency's read_waits map) keeps buckets
// WaitFirstSlot to MaxSlot of these: its bucket 0 holds everything up to
// 2^WaitFirstSlot ns (1.024 µs), bucket j > 0 holds (2^(j+9), 2^(j+10)] ns.
const (
	WaitFirstSlot = 10
	WaitBuckets   = MaxSlot - WaitFirstSlot + 1
)

// WaitUpperBound returns the inclusive upper bound of read-wait bucket j in ns.
func WaitUpperBound(j int) uint64 { return UpperBound(j + WaitFirstSlot) }

// Wait is how long one socket's received data waited until the application
// read it, over one refresh: per-bucket (not cumulative) counts, their sum
// and the largest sample.
type Wait struct {
	Buckets [WaitBuckets]uint64
	SumNs   uint64
	MaxNs   uint64
}

// Count returns the number of samples.
func (w *Wait) Count() uint64 { return total(w.Buckets[:]) }

// Add merges o into w.
func (w *Wait) Add(o *Wait) {
	for i, c := range o.Buckets {
		w.Buckets[i] += c
	}
	w.SumNs += o.SumNs
	w.MaxNs = max(w.MaxNs, o.MaxNs)
}

// Max returns the largest sample in ns, 0 without samples. MaxNs is kept
// by the kernel per refresh and may miss a sample taken while the refresh
// was read; when it lies below the highest bucket with samples, that
// bucket's upper bound stands in for it.
func (w *Wait) Max() uint64 {
	for j := WaitBuckets - 1; j >= 0; j-- {
		if w.Buckets[j] == 0 {
			continue
		}
		if j > 0 && w.MaxNs <= WaitUpperBound(j-1) {
			return WaitUpperBound(j)
		}
		return max(w.MaxNs, 1)
	}
	return 0
}

// Quantile returns an upper bound of the q-quantile (0 < q ≤ 1) in ns: the
// upper bound of the bucket holding the sample of rank ⌈q·count⌉, or the
// largest sample (Max) when that is lower, as it is in the highest bucket
// (the last bucket has no upper bound: it holds every larger value). 0
// without samples.
func (w *Wait) Quantile(q float64) uint64 {
	j := rankSlot(w.Buckets[:], q)
	switch j {
	case -1:
		return 0
	case WaitBuckets - 1:
		return w.Max()
	}
	return min(WaitUpperBound(j), w.Max())
}
