// SPDX-License-Identifier: Apache-2.0

package readwait

import (
	"testing"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/latency"
)

// histograms is a Source that hands out what the test put in it, and
// forgets what the join tells it to, as the kernel's table would.
type histograms struct{ waits latency.SocketWaits }

func (h *histograms) ReadWaits(into latency.SocketWaits) error {
	for k, w := range h.waits {
		into[k] = w
	}
	return nil
}

func (h *histograms) ForgetSockets(keys []latency.SocketKey) error {
	for _, k := range keys {
		delete(h.waits, k)
	}
	return nil
}

func (h *histograms) ReadWaitFull() (uint64, error) { return 0, nil }

func reads(n uint32) latency.SocketWait {
	var w latency.SocketWait
	w.Buckets[12] = n
	return w
}

// refresh runs one refresh over records and returns each one's reads.
func refresh(t *testing.T, j *Join, records ...*conn.Record) []uint64 {
	t.Helper()
	if err := j.Begin(); err != nil {
		t.Fatal(err)
	}
	got := make([]uint64, len(records))
	for i, r := range records {
		j.Fill(r)
		got[i] = r.ReadWaitSamples
	}
	if _, err := j.End(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestAddressReuse: before 5.12 a TCP socket's histogram is keyed by its
// address and identity. A new socket at a closed one's address gets its
// own reads, whether or not it has a record yet when they come, and
// forgetting the closed socket's histogram does not forget them.
func TestAddressReuse(t *testing.T) {
	const addr = 0xffff888012345678
	oldKey := latency.SocketKey{Socket: addr, SkID: 0x1111}
	newKey := latency.SocketKey{Socket: addr, SkID: 0x2222}
	src := &histograms{waits: latency.SocketWaits{oldKey: reads(3)}}
	j := New(src)
	old := &conn.Record{Cookie: addr, Sk: addr, SkID: oldKey.SkID}
	if got := refresh(t, j, old); got[0] != 3 {
		t.Fatalf("old socket: %d reads, want 3", got[0])
	}
	// The old socket closed and is reported; the new one at its address
	// read once before its record exists, and reads on while the old
	// histogram, claimed by no record for two refreshes, is forgotten.
	closed := &conn.Record{Cookie: addr, Sk: addr, SkID: oldKey.SkID, Event: conn.Closed}
	src.waits[newKey] = reads(1)
	if got := refresh(t, j, closed); got[0] != 0 {
		t.Errorf("closed socket got %d of the new socket's reads", got[0])
	}
	fresh := &conn.Record{Cookie: addr, Sk: addr, SkID: newKey.SkID}
	var total uint64
	for _, n := range []uint32{1, 5} {
		src.waits[newKey] = reads(n)
		total += refresh(t, j, fresh)[0]
	}
	if _, ok := src.waits[oldKey]; ok {
		t.Error("the closed socket's histogram is never forgotten")
	}
	if total != 5 {
		t.Errorf("new socket: %d reads, want 5", total)
	}
}

// TestCookieFirst: a record finds its socket's histogram by cookie where
// the kernel keys by cookie (5.12+), though it knows its address too.
func TestCookieFirst(t *testing.T) {
	const cookie, addr = 4711, 0xffff888012345678
	src := &histograms{waits: latency.SocketWaits{{Socket: cookie}: reads(4)}}
	r := &conn.Record{Cookie: cookie, Sk: addr, SkID: 0x3333}
	if got := refresh(t, New(src), r); got[0] != 4 {
		t.Errorf("%d reads, want 4", got[0])
	}
}
