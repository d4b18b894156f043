// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"bytes"
	"encoding/binary"
	"maps"
	"net/netip"
	"slices"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/termsafe"
)

// scratch is what Snapshot keeps between calls: what the last refresh
// reported, and buffers it reuses so that a refresh allocates little more
// than the records it returns. At 10,000 connections, allocating these anew
// each second (and collecting them) cost more CPU than reading the kernel's
// tables.
type scratch struct {
	refresh  uint64               // count of snapshots taken, marks what each saw
	selected int                  // records the last snapshot returned
	tcp      ledger[uint64]       // TCP sockets by cookie
	udp      ledger[connsFlowKey] // UDP flows by socket cookie and tuple
	cookies  []uint64             // the kernel's TCP table
	conns    []connsConn
	flowKeys []connsFlowKey // the kernel's UDP table
	flows    []connsFlow
	closed   []connsConn         // closed events drained from the ring buffer
	gone     map[uint64]struct{} // their cookies
	idle     []uint64            // preexisting sockets the kernel has no entry for
	comms    map[[16]int8]string // process names as the kernel reports them

	batchIndex []uint32    // 0, 1, …: the indexes of the refresh's key and entry arrays
	refreshed  []connsConn // one batch of refreshed entries
	ghosts     []connsConn // entries the refresh found without a socket, reported closed

	ownerPasses map[uint64]ownerSearch // accepted sockets without an owner of their own, by cookie
	unowned     []int                  // those this refresh looks for, as indexes into conns

	// Output order (see sort): the keys of this refresh's records as they
	// came, the previous refresh's, and the permutation that sorted those.
	keys, lastKeys []tupleKey
	order, perm    []int
}

// maxComms bounds the process-name cache: names are few on a real host, but
// a process may rename its threads at will.
const maxComms = 4096

// comm returns a kernel process name as a string, the same string for the
// same name every refresh rather than a new allocation per record.
func (s *scratch) comm(c [16]int8) string {
	if name, ok := s.comms[c]; ok {
		return name
	}
	if s.comms == nil || len(s.comms) >= maxComms {
		s.comms = map[[16]int8]string{}
	}
	b := make([]byte, 0, len(c))
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	name := termsafe.ValidUTF8(string(b))
	s.comms[c] = name
	return name
}

// begin starts a refresh: the per-refresh sets are emptied, their memory kept.
func (s *scratch) begin() {
	s.refresh++
	if s.gone == nil {
		s.tcp, s.udp, s.gone = ledger[uint64]{}, ledger[connsFlowKey]{}, map[uint64]struct{}{}
	}
	clear(s.gone)
}

// totals are a connection's counters as a refresh reported them.
type totals struct {
	in, out, packetsIn, packetsOut uint64
	rtt, retrans                   uint32
}

// newer puts t's counters into the kernel entry c where they are newer than
// its own (the counters only grow: compared by segments).
func (t totals) newer(c *connsConn) {
	if t.packetsIn+t.packetsOut > c.PacketsIn+c.PacketsOut {
		c.BytesIn, c.BytesOut, c.PacketsIn, c.PacketsOut = t.in, t.out, t.packetsIn, t.packetsOut
		c.SrttUs, c.Retrans = t.rtt, t.retrans
	}
}

// ledger holds the counters each connection had at the last refresh that
// reported it (for rates, to tell new from update, and to stand in for a
// refresh that could not read a socket). Entries are
// updated in place and swept, rather than rebuilt each refresh: keyed by
// cookie alone, a TCP socket costs one 8-byte hash.
type ledger[K comparable] map[K]reported

type reported struct {
	totals
	refresh uint64
}

// report records r's counts for this refresh (a closed connection is
// forgotten) and returns what the previous refresh had, if it saw k.
func (h ledger[K]) report(k K, r *conn.Record, closed bool, refresh uint64) (totals, bool) {
	prev, seen := h[k]
	if closed {
		delete(h, k)
	} else {
		h[k] = reported{totals{r.BytesIn, r.BytesOut, r.PacketsIn, r.PacketsOut, r.RTTus, r.Retrans}, refresh}
	}
	return prev.totals, seen
}

// forget drops the connections this refresh did not report.
func (h ledger[K]) forget(refresh uint64) {
	maps.DeleteFunc(h, func(_ K, r reported) bool { return r.refresh != refresh })
}

// sort puts records in tuple order (see sortKey), in place. Each record's
// key is built once and the keys are sorted with memory comparisons, then
// the records are moved once each: comparing and swapping the records
// themselves (200 bytes each) dominated the stream's CPU time at 10,000
// connections. When the records come in the same sequence as last refresh
// (the tables did not change: idle connections), last refresh's
// permutation is reused without sorting, which was a quarter of the stream's
// CPU time at 10,000 idle connections.
func (s *scratch) sort(records []conn.Record) {
	s.keys = s.keys[:0]
	for i := range records {
		s.keys = append(s.keys, sortKey(&records[i], i))
	}
	if !slices.Equal(s.keys, s.lastKeys) {
		s.lastKeys = append(s.lastKeys[:0], s.keys...)
		slices.SortFunc(s.keys, func(a, b tupleKey) int { return bytes.Compare(a.tuple[:], b.tuple[:]) })
		s.order = s.order[:0]
		for _, k := range s.keys {
			s.order = append(s.order, k.index)
		}
	}
	// Follow each cycle of the permutation: records[j] takes the record
	// at order[j], whose own place is then free for the next one.
	s.perm = append(s.perm[:0], s.order...)
	for i := range s.perm {
		if s.perm[i] < 0 {
			continue
		}
		first := records[i]
		for j := i; ; {
			from := s.perm[j]
			s.perm[j] = -1 // placed
			if from == i {
				records[j] = first
				break
			}
			records[j] = records[from]
			j = from
		}
	}
}

// tupleKey is a record's place in the output order, and which record it is.
type tupleKey struct {
	tuple [tupleLen]byte
	index int
}

// A tuple is protocol (1 byte), local address (17: bit length, then the 16
// bytes), local port (2), remote address (17), remote port (2), network
// namespace (4): all big-endian, so byte order is the order of the fields.
const tupleLen = 1 + 17 + 2 + 17 + 2 + 4

// sortKey orders records the same way every refresh: by protocol, then
// local and remote address and port, then namespace. Addresses order as
// netip.Addr.Compare orders them (IPv4 before IPv6); the tracker's records
// carry no zones.
func sortKey(r *conn.Record, index int) tupleKey {
	k := tupleKey{index: index}
	b := k.tuple[:0]
	b = append(b, r.Proto[0]) // "tcp" < "udp"
	b = appendAddr(b, r.LocalAddr)
	b = binary.BigEndian.AppendUint16(b, r.LocalPort)
	b = appendAddr(b, r.RemoteAddr)
	b = binary.BigEndian.AppendUint16(b, r.RemotePort)
	binary.BigEndian.AppendUint32(b, r.Netns)
	return k
}

func appendAddr(b []byte, a netip.Addr) []byte {
	b = append(b, byte(a.BitLen()/8)) // 0, 4 or 16: invalid < IPv4 < IPv6
	a16 := a.As16()
	return append(b, a16[:]...)
}
