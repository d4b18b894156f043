// SPDX-License-Identifier: Apache-2.0

// Package readwait joins the latency tracer's per-socket read-wait
// histograms to the connection records, by socket cookie: each record gets
// how long its socket's received data waited until the application read
// it, over the last refresh (`stream`/`top --read-wait`, `serve
// --collector.read-wait`). It implements conntrack.ReadWaitJoin.
package readwait

import (
	"fmt"
	"slices"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/latency"
)

// Source is the latency tracer started with Config.ReadWait.
type Source interface {
	ReadWaits(into latency.SocketWaits) error
	ForgetSockets(keys []latency.SocketKey) error
	ReadWaitFull() (uint64, error)
}

// Join turns the cumulative per-socket histograms into each refresh's
// growth. Not safe for concurrent use: the tracker calls it under its lock.
type Join struct {
	src Source
	cur latency.SocketWaits // this refresh's reading
	// prev is each socket's histogram when its growth was last taken.
	prev latency.SocketWaits
	// done is this refresh's growth per socket: the UDP flows of one
	// socket share it, and it is computed (prev advanced) once.
	done map[latency.SocketKey]*hist.Wait
	// idle are the sockets no record claimed at the last refresh: one
	// refresh more and their histograms are forgotten. A socket first read
	// after the connection tables were read has its record only at the
	// next refresh, and must not lose its reads meanwhile.
	idle map[latency.SocketKey]struct{}
	// Two arenas, alternating: a snapshot's records point into one while
	// the next snapshot fills the other.
	arenas [2][]hist.Wait
	turn   int
	gone   []latency.SocketKey
}

// New returns a join over src.
func New(src Source) *Join {
	return &Join{src: src, cur: latency.SocketWaits{}, prev: latency.SocketWaits{},
		done: map[latency.SocketKey]*hist.Wait{}, idle: map[latency.SocketKey]struct{}{}}
}

// Begin reads the histograms and ends the kernel's refresh. Call it after
// the closed connections are collected, so that every read of a socket
// closed by then is in them.
func (j *Join) Begin() error {
	clear(j.done)
	j.turn ^= 1
	if err := j.src.ReadWaits(j.cur); err != nil {
		return fmt.Errorf("reading read waits: %w", err)
	}
	// Never more than one entry per socket: the arena does not move.
	j.arenas[j.turn] = slices.Grow(j.arenas[j.turn][:0], len(j.cur))
	return nil
}

// Fill sets r's read-wait fields from its socket's histogram (by
// r.Cookie, or before 5.12 r.Sk and r.SkID), all 0 when the socket had no
// read since the last refresh.
func (j *Join) Fill(r *conn.Record) {
	key := latency.SocketKey{Socket: r.Cookie}
	if _, ok := j.cur[key]; !ok && r.Sk != 0 {
		key = latency.SocketKey{Socket: r.Sk, SkID: r.SkID}
	}
	w, ok := j.done[key]
	if !ok {
		w = j.growth(key)
		j.done[key] = w
	}
	r.ReadWait = w
	r.ReadWaitP50us, r.ReadWaitP99us, r.ReadWaitMaxus, r.ReadWaitSamples = 0, 0, 0, 0
	if w == nil {
		return
	}
	r.ReadWaitP50us = micros(w.Quantile(0.5))
	r.ReadWaitP99us = micros(w.Quantile(0.99))
	r.ReadWaitMaxus = micros(w.Max())
	r.ReadWaitSamples = w.Count()
}

// growth is what key's histogram added since its growth was last taken,
// nil for none; it advances prev at once, so a refresh that fails before
// End counts nothing twice.
func (j *Join) growth(key latency.SocketKey) *hist.Wait {
	cur, ok := j.cur[key]
	if !ok {
		return nil
	}
	prev := j.prev[key] // zero for a socket first read since
	j.prev[key] = cur
	d := cur.Since(&prev)
	if d.Count() == 0 {
		return nil
	}
	arena := append(j.arenas[j.turn], d)
	j.arenas[j.turn] = arena
	return &arena[len(arena)-1]
}

// End forgets the histograms of sockets no record claimed at this refresh
// nor the last — gone, or never tracked (a full connection table) — and
// returns the samples that found the kernel's table full since start.
func (j *Join) End() (uint64, error) {
	j.gone = j.gone[:0]
	for key := range j.cur {
		if _, claimed := j.done[key]; claimed {
			delete(j.idle, key)
			continue
		}
		if _, was := j.idle[key]; !was {
			j.idle[key] = struct{}{}
			continue
		}
		j.gone = append(j.gone, key)
		delete(j.idle, key)
		delete(j.prev, key)
	}
	for key := range j.prev {
		if _, ok := j.cur[key]; !ok {
			delete(j.prev, key)
		}
	}
	for key := range j.idle {
		if _, ok := j.cur[key]; !ok {
			delete(j.idle, key)
		}
	}
	if err := j.src.ForgetSockets(j.gone); err != nil {
		return 0, err
	}
	return j.src.ReadWaitFull()
}

// micros converts ns to µs, rounding up: a wait is never shown shorter
// than its bound.
func micros(ns uint64) uint64 { return (ns + 999) / 1000 }
