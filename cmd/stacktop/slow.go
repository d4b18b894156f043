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
	"github.com/stacktop/stacktop/internal/cliflag"
	"github.com/stacktop/stacktop/internal/latency"
)

// slowFlags are --slow and --slow-limit.
type slowFlags struct {
	threshold time.Duration
	limit     int
	fs        *pflag.FlagSet
}

// maxSlowLimit bounds --slow-limit: more events per second than a terminal
// or a pipe takes in.
const maxSlowLimit = 1_000_000

func (f *slowFlags) register(fs *pflag.FlagSet) {
	f.fs = fs
	cliflag.DurationVarP(fs, &f.threshold, "slow", "", 0, slowRange, "also print every packet whose latency at an enabled probe exceeds this duration (e.g. 50ms; bare numbers are seconds), with its connection and reader")
	cliflag.IntVarP(fs, &f.limit, "slow-limit", "", 1000, 0, maxSlowLimit, "at most this many --slow events per second (0: no limit); the others are counted")
}

// slowRange bounds --slow: a packet a day late is not slow, it is lost.
var slowRange = cliflag.Range{Min: time.Nanosecond, Max: 24 * time.Hour}

// config validates the flags into cfg; errors name the flag and value.
func (f *slowFlags) config(cfg *latency.Config) error {
	if f.threshold == 0 && f.fs.Changed("slow-limit") {
		return clierr.Usage("slow-limit", strconv.Itoa(f.limit), "needs --slow")
	}
	cfg.Slow, cfg.SlowLimit = f.threshold, uint32(f.limit)
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
