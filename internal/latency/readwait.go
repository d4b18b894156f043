// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/stacktop/stacktop/internal/bpfmap"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/hist"
)

// DefaultMaxSockets bounds the sockets that have a read-wait histogram
// (Config.MaxSockets 0). Entries are allocated as sockets first read (the
// map is not preallocated), 160-odd bytes each.
const DefaultMaxSockets = 65536

// The C's bucket layout is internal/hist's: checked at compile time.
var _ [hist.WaitBuckets]uint32 = latencyReadWait{}.Slots

// readWaitCookieHelper is the value of read_wait_cookie_helper: whether
// the programs key sockets by bpf_get_socket_cookie (5.12+). Probed only
// when read wait is on: off, the constant guards nothing.
func readWaitCookieHelper(cfg Config) bool {
	return !cfg.ReadWait || features.SocketCookieTracing() && !cfg.noCookieHelper
}

// readWaitSockets sizes read_waits: 1 (unused) when read wait is off.
func readWaitSockets(cfg Config) uint32 {
	if !cfg.ReadWait {
		return 1
	}
	return cmp.Or(cfg.MaxSockets, DefaultMaxSockets)
}

// SocketWaits are the per-socket read-wait histograms (Config.ReadWait).
type SocketWaits map[SocketKey]SocketWait

// SocketKey names a socket's histogram: by its cookie, the key conntrack
// gives the same socket (SkID 0). On kernels before 5.12 (no cookie helper
// for tracing programs) TCP sockets are named by their kernel address and
// identity, which conntrack's entries keep too (conn.Record Sk and SkID),
// and UDP sockets by the cookie conntrack made at socket(), else by address
// and identity. The identity gives a socket that reuses a freed one's
// memory a histogram of its own.
type SocketKey struct {
	Socket uint64 // cookie or address
	SkID   uint32
}

// SocketWait is one socket's histogram as the kernel keeps it: the counts
// are cumulative since the socket's first read and wrap at 2^32 (subtract
// with uint32 arithmetic); MaxNs is the largest sample since the previous
// ReadWaits call.
type SocketWait struct {
	Buckets [hist.WaitBuckets]uint32
	SumNs   uint64
	MaxNs   uint64
}

// Since returns what w added to prev (the same socket's histogram at the
// previous refresh; the zero value for a socket not seen then).
func (w *SocketWait) Since(prev *SocketWait) hist.Wait {
	var d hist.Wait
	for j := range w.Buckets {
		d.Buckets[j] = uint64(w.Buckets[j] - prev.Buckets[j])
	}
	d.SumNs, d.MaxNs = w.SumNs-prev.SumNs, w.MaxNs
	return d
}

// readWaitScratch is the memory ReadWaits reads the map into, kept from one
// refresh to the next.
type readWaitScratch struct {
	keys   []latencyReadWaitKey
	values []latencyReadWait
}

// ReadWaits ends a refresh of the per-socket histograms and puts them into
// into (cleared first): the cumulative counts, and the largest sample of
// the refresh that ends. Call it once per refresh, from one goroutine.
func (t *Tracer) ReadWaits(into SocketWaits) error {
	t.mapsMu.RLock()
	defer t.mapsMu.RUnlock()
	waits, epochs := t.readWaitMaps()
	if waits == nil {
		return fmt.Errorf("tracer is closed")
	}
	clear(into)
	// A new epoch first: every sample from now on keeps its max apart.
	var zero, epoch uint32
	if err := epochs.Lookup(zero, &epoch); err != nil {
		return fmt.Errorf("reading the read-wait epoch: %w", err)
	}
	if err := epochs.Put(zero, epoch+1); err != nil {
		return fmt.Errorf("starting a read-wait epoch: %w", err)
	}
	var err error
	s := &t.readWaitScratch
	if s.keys, s.values, err = bpfmap.ReadAll(waits, s.keys, s.values); err != nil {
		return fmt.Errorf("reading read-wait histograms: %w", err)
	}
	for i, key := range s.keys {
		v := &s.values[i]
		w := SocketWait{Buckets: v.Slots, SumNs: v.SumNs}
		switch v.Epoch {
		case epoch: // no sample since the bump
			w.MaxNs = v.MaxCur
		case epoch + 1: // samples since the bump, counted now too
			w.MaxNs = max(v.MaxPrev, v.MaxCur)
		}
		into[SocketKey{Socket: key.Socket, SkID: key.SkId}] = w
	}
	return nil
}

// ForgetSockets deletes the histograms of sockets that are gone.
func (t *Tracer) ForgetSockets(gone []SocketKey) error {
	if len(gone) == 0 {
		return nil
	}
	keys := make([]latencyReadWaitKey, len(gone))
	for i, k := range gone {
		keys[i] = latencyReadWaitKey{Socket: k.Socket, SkId: k.SkID}
	}
	t.mapsMu.RLock()
	defer t.mapsMu.RUnlock()
	waits, _ := t.readWaitMaps()
	if waits == nil {
		return fmt.Errorf("tracer is closed")
	}
	for len(keys) > 0 {
		// A batch stops at a key that is not there: skip it, go on.
		n, err := waits.BatchDelete(keys, nil)
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			n++
		case err != nil:
			return fmt.Errorf("forgetting read-wait histograms: %w", err)
		}
		keys = keys[min(n, len(keys)):]
	}
	return nil
}

// readWaitMaps are the per-socket histograms and the epoch; nil once closed.
func (t *Tracer) readWaitMaps() (waits, epoch *ebpf.Map) {
	return t.objs.ReadWaits, t.objs.ReadWaitEpoch
}

// ReasonReadWaitFull names the counter of socket-read samples that found
// no room for their socket's read-wait histogram (Config.MaxSockets).
const ReasonReadWaitFull = "read_wait_full"

// ReadWaitFull returns how many socket-read samples found the read-wait
// table full, since start.
func (t *Tracer) ReadWaitFull() (uint64, error) {
	t.mapsMu.RLock()
	defer t.mapsMu.RUnlock()
	m := t.objs.Counters
	if m == nil {
		return 0, fmt.Errorf("tracer is closed")
	}
	var n uint64
	for _, h := range []Hook{TCPSocketRead, UDPSocketRead} {
		c, err := readCounter(m, h, latencyReasonREASON_READ_WAIT_FULL)
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}
