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
