// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"cmp"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"unsafe"

	"github.com/stacktop/stacktop/internal/conn"
)

// TestSortOrdersByTuple: the byte keys order records exactly as comparing
// their fields in turn does (protocol, local address and port, remote
// address and port, namespace; IPv4 before IPv6).
func TestSortOrdersByTuple(t *testing.T) {
	addrs := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"),
		netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("255.255.255.255"), netip.IPv4Unspecified(),
		netip.MustParseAddr("::1"), netip.MustParseAddr("fd00::1"), netip.IPv6Unspecified(), {}}
	rng := rand.New(rand.NewPCG(1, 2))
	var records []conn.Record
	for range 2000 {
		records = append(records, conn.Record{
			Proto:      []string{"tcp", "udp"}[rng.IntN(2)],
			LocalAddr:  addrs[rng.IntN(len(addrs))],
			LocalPort:  []uint16{0, 1, 80, 256, 65535}[rng.IntN(5)],
			RemoteAddr: addrs[rng.IntN(len(addrs))],
			RemotePort: []uint16{0, 1, 80, 256, 65535}[rng.IntN(5)],
			Netns:      []uint32{1, 4026531833, 1 << 31}[rng.IntN(3)],
		})
	}
	var s scratch
	requireSorted(t, &s, records)
}

// TestSortAgainAfterChanges: a refresh whose records come in the same
// sequence as the last one reuses its order; one that differs in a single
// record, or in length, is sorted afresh. Each comes out in tuple order.
func TestSortAgainAfterChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var records []conn.Record
	for range 500 {
		records = append(records, conn.Record{Proto: "tcp", LocalAddr: netip.MustParseAddr("127.0.0.1"),
			LocalPort: uint16(rng.IntN(65536)), RemoteAddr: netip.MustParseAddr("127.0.0.1"), RemotePort: 80})
	}
	var s scratch
	requireSorted(t, &s, records)
	requireSorted(t, &s, records) // the same sequence
	changed := slices.Clone(records)
	changed[250].LocalPort++
	requireSorted(t, &s, changed)
	requireSorted(t, &s, records[:400])
	requireSorted(t, &s, records)
}

// requireSorted sorts a copy of in with s and checks the result against
// comparing the fields in turn.
func requireSorted(t *testing.T, s *scratch, in []conn.Record) {
	t.Helper()
	got, want := slices.Clone(in), slices.Clone(in)
	s.sort(got)
	slices.SortStableFunc(want, func(a, b conn.Record) int {
		return cmp.Or(cmp.Compare(a.Proto, b.Proto),
			a.LocalAddr.Compare(b.LocalAddr), cmp.Compare(a.LocalPort, b.LocalPort),
			a.RemoteAddr.Compare(b.RemoteAddr), cmp.Compare(a.RemotePort, b.RemotePort),
			cmp.Compare(a.Netns, b.Netns))
	})
	for i := range want {
		if sortKey(&got[i], 0) != sortKey(&want[i], 0) {
			t.Fatalf("record %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestCommIsShared: one process name is one string, however many records
// carry it, and a NUL ends it.
func TestCommIsShared(t *testing.T) {
	var s scratch
	name := [16]int8{'n', 'g', 'i', 'n', 'x', 0, 'x'}
	a, b := s.comm(name), s.comm(name)
	if a != "nginx" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("comm = %q, %q", a, b)
	}
	if full := s.comm([16]int8{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p'}); full != "abcdefghijklmnop" {
		t.Errorf("comm without NUL = %q", full)
	}
}
