// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/latency"
)

// slowFlags are --slow and --slow-limit.
type slowFlags struct {
	threshold string
	limit     string
	fs        *pflag.FlagSet
}

// maxSlowLimit bounds --slow-limit: more events per second than a terminal
// or a pipe takes in.
const maxSlowLimit = 1_000_000

func (f *slowFlags) register(fs *pflag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.threshold, "slow", "", "also print every packet whose latency at an enabled probe exceeds this duration (e.g. 50ms), with its connection and reader")
	fs.StringVar(&f.limit, "slow-limit", "1000", "at most this many --slow events per second (0: no limit); the others are counted")
}

// config validates the flags into cfg; errors name the flag and value.
func (f *slowFlags) config(cfg *latency.Config) error {
	if f.threshold == "" {
		if f.fs.Changed("slow-limit") {
			return clierr.Usage("slow-limit", f.limit, "needs --slow")
		}
		if f.fs.Changed("slow") {
			return clierr.Usage("slow", "", "must be a duration such as 50ms")
		}
		return nil
	}
	d, err := time.ParseDuration(f.threshold)
	if err != nil || d <= 0 || d > 24*time.Hour {
		return clierr.Usage("slow", f.threshold, "must be a duration from 1ns to 24h, such as 50ms")
	}
	n, err := strconv.ParseUint(f.limit, 10, 32)
	if err != nil || n > maxSlowLimit {
		return clierr.Usage("slow-limit", f.limit, "must be a number of events per second from 0 (no limit) to %d", maxSlowLimit)
	}
	cfg.Slow, cfg.SlowLimit = d, uint32(n)
	return nil
}

// slowPrinter prints the tracer's slow events as they arrive, between the
// reports (mu keeps a report and an event from interleaving).
type slowPrinter struct {
	tr      *latency.Tracer
	w       io.Writer
	json    bool
	mu      *sync.Mutex
	printed atomic.Uint64
	done    chan struct{}
	err     error // why printing stopped, once done is closed
	warned  uint64
}

func startSlowPrinter(tr *latency.Tracer, w io.Writer, format string, mu *sync.Mutex) *slowPrinter {
	p := &slowPrinter{tr: tr, w: w, json: format == "json", mu: mu, done: make(chan struct{})}
	go p.run()
	return p
}

func (p *slowPrinter) run() {
	defer close(p.done)
	write := latency.WriteSlowText
	if p.json {
		write = latency.WriteSlowJSON
	}
	for {
		ev, err := p.tr.ReadSlow()
		if errors.Is(err, latency.ErrSlowFlushed) || errors.Is(err, latency.ErrSlowClosed) {
			return
		}
		if err == nil {
			p.mu.Lock()
			err = write(p.w, ev)
			p.mu.Unlock()
		}
		if err != nil {
			p.err = err
			return
		}
		p.printed.Add(1)
	}
}

// drain prints the events queued so far and stops: for the last report.
func (p *slowPrinter) drain() error {
	if err := p.tr.FlushSlow(); err != nil {
		return err
	}
	<-p.done
	return p.err
}

// slowSummary is the JSON line that ends each report with --slow.
type slowSummary struct {
	TS      time.Time `json:"ts"`
	Event   string    `json:"event"` // "slow_summary"
	Printed uint64    `json:"printed"`
	latency.SlowDrops
}

// summary prints, after a report, how many slow events were printed and how
// many were not, and why; a full ring buffer is also warned about.
func (p *slowPrinter) summary(w io.Writer, ts time.Time) error {
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("printing slow events: %w", p.err)
		}
	default:
	}
	drops, err := p.tr.SlowDrops()
	if err != nil {
		return err
	}
	if drops.RingFull > p.warned {
		slog.Warn("slow events lost: the ring buffer was full (output too slow?)", "lost", drops.RingFull)
		p.warned = drops.RingFull
	}
	s := slowSummary{TS: ts, Event: "slow_summary", Printed: p.printed.Load(), SlowDrops: drops}
	if p.json {
		return json.NewEncoder(w).Encode(s)
	}
	_, err = fmt.Fprintf(w, "slow events: %d printed, %d lost (ring buffer full), %d over --slow-limit\n\n",
		s.Printed, s.RingFull, s.Limited)
	return err
}
