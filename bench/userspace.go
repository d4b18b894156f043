// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stacktop/stacktop/bench/internal/connload"
	"github.com/stacktop/stacktop/bench/internal/peer"
	"github.com/stacktop/stacktop/bench/internal/proc"
	"github.com/stacktop/stacktop/bench/internal/tool"
)

type userspaceResult struct {
	Conns      int    `json:"conns"`
	Namespaces int    `json:"namespaces"` // network namespaces the connections are spread over
	Output     string `json:"output"`     // what the stream printed
	usage
	// RecordsPerSec counts the stream's records about the benchmark's own
	// connections per second of the window: about 2×Conns at a 1 s
	// refresh, as both ends of each connection are local sockets.
	RecordsPerSec float64       `json:"records_per_sec"`
	Setup         time.Duration `json:"setup_ns"` // time to open all connections
	Loss          streamLoss    `json:"loss"`
}

type churnResult struct {
	Tool     string               `json:"tool"` // stream or serve
	Rate     int                  `json:"rate"`
	Achieved float64              `json:"achieved_per_sec"`
	Load     connload.ChurnResult `json:"load"`
	usage
	New    uint64     `json:"new_events"`    // the stream's "new" records about the churned connections
	Closed uint64     `json:"closed_events"` // the stream's "closed" records about them
	Loss   streamLoss `json:"loss"`
}

// usage is what the tool's process consumed over the window.
type usage struct {
	CPU    float64 `json:"cpu"` // CPU seconds per second: 0.02 is 2% of one core
	RSSMax uint64  `json:"rss_max"`
}

// The stream runs with JSON output at a 1 s refresh, as a user would run
// it, its output read by the harness to count records and losses.
var streamArgs = []string{"--format", "json", "--interval", "1s"}

func runUserSpace(ctx context.Context, cfg config, env tool.Env) ([]userspaceResult, []churnResult, error) {
	tools, err := tool.Lookup([]string{"stream", "serve"})
	if err != nil {
		return nil, nil, err
	}
	stream := tools[:1]
	var out []userspaceResult
	for _, n := range cfg.Scale {
		rs, err := trackIdle(ctx, cfg, env, stream[0], n)
		if err != nil {
			return out, nil, fmt.Errorf("%d connections: %w", n, err)
		}
		for _, r := range rs {
			slog.Info("userspace", "conns", n, "output", r.Output, "cpu", fmt.Sprintf("%.2f%%", 100*r.CPU),
				"rss_mib", r.RSSMax>>20, "records_per_sec", int(r.RecordsPerSec), "lost", r.Loss.Lost, "map_full", r.Loss.MapFull)
		}
		out = append(out, rs...)
	}
	if cfg.Namespaces > 0 {
		r, err := trackSpread(ctx, cfg, env, stream[0], cfg.Namespaces)
		if err != nil {
			return out, nil, fmt.Errorf("%d namespaces: %w", cfg.Namespaces, err)
		}
		slog.Info("userspace", "conns", r.Conns, "namespaces", r.Namespaces, "cpu", fmt.Sprintf("%.2f%%", 100*r.CPU),
			"rss_mib", r.RSSMax>>20, "records_per_sec", int(r.RecordsPerSec), "lost", r.Loss.Lost, "map_full", r.Loss.MapFull)
		out = append(out, r)
	}
	if cfg.Churn == 0 {
		return out, nil, nil
	}
	var churns []churnResult
	for _, t := range tools {
		c, err := churn(ctx, cfg, env, t)
		if err != nil {
			return out, churns, fmt.Errorf("churn, %s: %w", t.Name, err)
		}
		slog.Info("churn", "tool", t.Name, "rate", int(c.Achieved), "cpu", fmt.Sprintf("%.2f%%", 100*c.CPU),
			"new", c.New, "closed", c.Closed, "lost", c.Loss.Lost, "map_full", c.Loss.MapFull)
		churns = append(churns, c)
	}
	return out, churns, nil
}

// trackIdle measures the stream with n idle connections open, twice. First
// printing every record: the stream is started before the connections, so
// their opening is a burst of events it must not lose. Then with the output
// filtered down to nothing (--port 9, a port nothing here uses): the cost of
// tracking the connections without formatting them, started while they are
// open and still running when they all close.
func trackIdle(ctx context.Context, cfg config, env tool.Env, stream tool.Tool, n int) ([]userspaceResult, error) {
	all := userspaceResult{Conns: n, Namespaces: 1, Output: "every record"}
	watch := &streamWatch{}
	run, err := tool.Start(ctx, env, stream, watch, streamArgs...)
	if err != nil {
		return nil, err
	}
	defer run.Stop()
	start := time.Now()
	hold, err := startHolders(n, cfg.holdPort())
	if err != nil {
		return nil, err
	}
	defer hold.stop()
	all.Setup = time.Since(start)
	if err := all.sample(ctx, cfg, run, watch, fmt.Sprintf("stream-%d-all", n)); err != nil {
		return nil, err
	}
	run.Stop()

	quiet := userspaceResult{Conns: n, Namespaces: 1, Output: "none (--port 9)"}
	watch = &streamWatch{}
	if run, err = tool.Start(ctx, env, stream, watch, slices.Concat(streamArgs, []string{"--port", "9"})...); err != nil {
		return nil, err
	}
	defer run.Stop()
	time.Sleep(2 * time.Second)
	if quiet.usage, err = measure(ctx, run, cfg.Window); err != nil {
		return nil, err
	}
	if cfg.Profile {
		profile(cfg, run.Pid(), fmt.Sprintf("stream-%d-quiet", n), cfg.Window)
	}
	if err := hold.stop(); err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second) // the closes are processed
	quiet.Loss = watch.snapshot().loss
	return []userspaceResult{all, quiet}, nil
}

// trackSpread measures the stream with one idle connection open in each of
// m network namespaces, as on a host of pods: what the stream costs then
// follows how it reaches the sockets of every namespace, not their number.
func trackSpread(ctx context.Context, cfg config, env tool.Env, stream tool.Tool, m int) (userspaceResult, error) {
	r := userspaceResult{Conns: m, Namespaces: m, Output: "every record"}
	var holds holders
	defer func() { _ = holds.stop() }()
	for i := range m {
		ns, err := peer.Loopback(fmt.Sprintf("stb-spread%d", i))
		if err != nil {
			return r, err
		}
		defer ns.Close()
		l, err := startLoaderIn(ns, "hold", "-n", "1", "-listeners", "1", "-port", strconv.Itoa(int(cfg.holdPort())))
		if err != nil {
			return r, err
		}
		holds = append(holds, l)
	}
	for _, l := range holds {
		if line, err := l.next(time.Minute); err != nil || line != "ready" {
			return r, fmt.Errorf("holding connections: %q, %v", line, err)
		}
	}
	watch := &streamWatch{}
	run, err := tool.Start(ctx, env, stream, watch, streamArgs...)
	if err != nil {
		return r, err
	}
	defer run.Stop()
	err = r.sample(ctx, cfg, run, watch, fmt.Sprintf("stream-%d-namespaces", m))
	return r, err
}

// sample measures the running stream over cfg.Window once two refreshes
// have reported every connection, counts its records about them and its
// losses, and profiles it as name when asked.
func (r *userspaceResult) sample(ctx context.Context, cfg config, run *tool.Running, watch *streamWatch, name string) error {
	time.Sleep(2 * time.Second)
	watch.reset()
	var err error
	if r.usage, err = measure(ctx, run, cfg.Window); err != nil {
		return err
	}
	s := watch.snapshot()
	r.RecordsPerSec = float64(s.ours) / cfg.Window.Seconds()
	r.Loss = s.loss
	if cfg.Profile {
		profile(cfg, run.Pid(), name, cfg.Window)
	}
	return nil
}

// churn runs the stream (JSON output read by the harness) or serve
// (scraped every second) while connections open and close at cfg.Churn per
// second: what the tool costs, and the stream's new/closed records and
// either tool's loss counters.
func churn(ctx context.Context, cfg config, env tool.Env, t tool.Tool) (churnResult, error) {
	r := churnResult{Tool: t.Name, Rate: cfg.Churn}
	watch := &streamWatch{}
	var args []string
	if t.Command == "stream" {
		args = streamArgs
	}
	run, err := tool.Start(ctx, env, t, watch, args...)
	if err != nil {
		return r, err
	}
	defer run.Stop()
	load, err := startLoader("churn", "-rate", strconv.Itoa(cfg.Churn), "-listeners", "8",
		"-port", strconv.Itoa(int(cfg.churnPort())))
	if err != nil {
		return r, err
	}
	defer load.stop()
	if r.usage, err = measure(ctx, run, cfg.Window); err != nil {
		return r, err
	}
	line, err := load.stop()
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(line), &r.Load); err != nil {
		return r, fmt.Errorf("churn result %q: %w", line, err)
	}
	r.Achieved = float64(r.Load.Opened) / r.Load.Elapsed.Seconds()
	time.Sleep(2 * time.Second) // the last closed events are reported
	if t.Command == "stream" {
		s := watch.snapshot()
		r.New, r.Closed, r.Loss = s.new, s.closed, s.loss
		return r, nil
	}
	r.Loss, err = servedLoss("http://" + env.ServeAddr.String() + "/metrics")
	return r, err
}

// servedLoss reads serve's loss counters from its endpoint: every source's
// lost events and full-map updates, summed.
func servedLoss(url string) (streamLoss, error) {
	var l streamLoss
	resp, err := http.Get(url)
	if err != nil {
		return l, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return l, err
	}
	for line := range strings.Lines(string(body)) {
		name, _, _ := strings.Cut(line, "{")
		counter := map[string]*uint64{"stacktop_lost_events_total": &l.Lost, "stacktop_map_full_total": &l.MapFull}[name]
		if counter == nil {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' ')+1:]), 64)
		if err != nil {
			return l, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		*counter += uint64(v)
		l.Reports++
	}
	return l, nil
}

// measure samples the tool's CPU time and RSS over window.
func measure(ctx context.Context, run *tool.Running, window time.Duration) (usage, error) {
	var u usage
	pid := run.Pid()
	cpu0, err := proc.CPUTime(pid)
	if err != nil {
		return u, err
	}
	t0 := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for time.Since(t0) < window {
		select {
		case <-ctx.Done():
			return u, ctx.Err()
		case <-run.Exited():
			return u, fmt.Errorf("%s exited during the measurement", run.Tool.Name)
		case <-tick.C:
		}
		if rss, err := proc.RSS(pid); err == nil {
			u.RSSMax = max(u.RSSMax, rss)
		}
	}
	cpu1, err := proc.CPUTime(pid)
	if err != nil {
		return u, err
	}
	u.CPU = (cpu1 - cpu0).Seconds() / time.Since(t0).Seconds()
	return u, nil
}

// streamLoss is the stream's own account of what it could not see:
// cumulative counters, so the largest values seen are the totals.
type streamLoss struct {
	Lost    uint64 `json:"lost"`     // ring-buffer events dropped
	MapFull uint64 `json:"map_full"` // map updates dropped
	Reports int    `json:"reports"`  // lines that carried the counters
}

// streamWatch reads `stacktop stream --format json` output as it is
// written. It looks only for the benchmark's own connections (addresses
// 127.83.x.x) and for loss counters, with byte searches rather than full
// JSON decoding so that reading 200,000 records a second stays cheap.
type streamWatch struct {
	mu      sync.Mutex
	partial []byte
	stats   watchStats
}

type watchStats struct {
	ours, new, closed uint64
	loss              streamLoss
}

var (
	ourAddr     = []byte(`"127.83.`)
	eventNew    = []byte(`"event":"new"`)
	eventClosed = []byte(`"event":"closed"`)
	lossKey     = []byte(`"lost"`)
)

func (w *streamWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	data := append(w.partial, p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		w.line(data[:i])
		data = data[i+1:]
	}
	w.partial = append(w.partial[:0], data...)
	return len(p), nil
}

func (w *streamWatch) line(l []byte) {
	if bytes.Contains(l, ourAddr) {
		w.stats.ours++
		switch {
		case bytes.Contains(l, eventNew):
			w.stats.new++
		case bytes.Contains(l, eventClosed):
			w.stats.closed++
		}
		return
	}
	if !bytes.Contains(l, lossKey) {
		return
	}
	var c struct {
		Lost    uint64 `json:"lost"`
		MapFull uint64 `json:"map_full"`
	}
	if json.Unmarshal(l, &c) == nil {
		w.stats.loss.Lost = max(w.stats.loss.Lost, c.Lost)
		w.stats.loss.MapFull = max(w.stats.loss.MapFull, c.MapFull)
		w.stats.loss.Reports++
	}
}

// reset zeroes the record counts, keeping the cumulative loss counters.
func (w *streamWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats = watchStats{loss: w.stats.loss}
}

func (w *streamWatch) snapshot() watchStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}
