// Package hist defines the log2 latency histograms shared by the BPF
// programs and every consumer, with ebpf_exporter's exp2 semantics so the
// same data feeds Prometheus unchanged.
package hist

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
func (h *Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Buckets {
		n += c
	}
	return n
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
}
