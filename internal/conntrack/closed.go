// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// closedCollector reads closed-connection events from the ring buffer
// whenever the kernel wakes it — only once a quarter of the ring waits
// (CLOSED_WAKEUP_BYTES in bpf/conns.bpf.c: a wakeup per event cost every
// close microseconds) — and at every take, which flushes the ring. The ring
// (which every process mapping it counts twice in its RSS) then only has to
// absorb a burst, not every close between two snapshots. It holds at most
// limit events between two takes; more are counted as lost, as a full ring
// would have.
type closedCollector struct {
	reader  *ringbuf.Reader
	limit   int
	flushed chan struct{} // one value per Flush, once the events before it are pending
	done    chan struct{} // closed when collecting stopped; err says why
	err     error
	lost    atomic.Uint64

	mu      sync.Mutex
	pending []connsConn
}

func newClosedCollector(ring *ebpf.Map, limit int) (*closedCollector, error) {
	reader, err := ringbuf.NewReader(ring)
	if err != nil {
		return nil, fmt.Errorf("ring buffer: %w", err)
	}
	c := &closedCollector{reader: reader, limit: limit, flushed: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c, nil
}

func (c *closedCollector) run() {
	defer close(c.done)
	var rec ringbuf.Record
	for {
		err := c.reader.ReadInto(&rec)
		switch {
		case errors.Is(err, ringbuf.ErrFlushed):
			c.flushed <- struct{}{}
			continue
		case errors.Is(err, ringbuf.ErrClosed):
			c.err = ringbuf.ErrClosed
			return
		case err != nil:
			c.err = fmt.Errorf("reading closed connections: %w", err)
			return
		}
		var ev connsConn
		// The kernel wrote the struct in this machine's layout: copy its
		// bytes rather than decode field by field with reflection.
		if !decodeInto(&ev, rec.RawSample) {
			c.err = fmt.Errorf("decoding closed connection: %d bytes, want %d", len(rec.RawSample), unsafe.Sizeof(ev))
			return
		}
		c.mu.Lock()
		if len(c.pending) < c.limit {
			c.pending = append(c.pending, ev)
		} else {
			c.lost.Add(1)
		}
		c.mu.Unlock()
	}
}

// take appends to out every event the kernel wrote before the call.
func (c *closedCollector) take(out []connsConn) ([]connsConn, error) {
	if err := c.reader.Flush(); err != nil {
		return out, fmt.Errorf("reading closed connections: %w", err)
	}
	select {
	case <-c.flushed:
	case <-c.done:
		return out, c.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out = append(out, c.pending...)
	clear(c.pending)
	c.pending = c.pending[:0]
	return out, nil
}

// close stops collecting.
func (c *closedCollector) close() error {
	err := c.reader.Close()
	<-c.done
	return err
}

// decodeInto copies a sample that the kernel wrote in this machine's layout
// into v; false if the sample is too short to be one.
func decodeInto[T any](v *T, raw []byte) bool {
	size := int(unsafe.Sizeof(*v))
	if len(raw) < size {
		return false
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(v)), size), raw)
	return true
}
