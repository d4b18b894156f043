package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/stacktop/stacktop/bench/internal/httpload"
	"github.com/stacktop/stacktop/bench/internal/proc"
	"github.com/stacktop/stacktop/bench/internal/rounds"
	"github.com/stacktop/stacktop/bench/internal/tool"
)

type overheadResult struct {
	Path   string          `json:"path"`
	Conns  int             `json:"conns"`
	Rounds []overheadRound `json:"rounds"`
	Ratios []rounds.Ratio  `json:"ratios"`
	// ToolCPU is the median over rounds of each tool's own CPU use.
	ToolCPU map[string]float64 `json:"tool_cpu"`
}

type overheadRound struct {
	Tool string          `json:"tool"`
	Wrk  httpload.Result `json:"wrk"`
	// ToolCPU is the tool process's own CPU time per second of the round
	// (user space plus the system calls it makes; BPF programs run in the
	// context of the traffic and are not in it).
	ToolCPU float64 `json:"tool_cpu"`
}

// runOverhead runs, for every path and connection count, the interleaved
// schedule of baseline and tool rounds.
func runOverhead(ctx context.Context, cfg config, env tool.Env, w *workload) ([]overheadResult, error) {
	var out []overheadResult
	schedule := rounds.Schedule(cfg.Tools, cfg.Rounds)
	for _, path := range cfg.Paths {
		for _, conns := range cfg.Conns {
			r := overheadResult{Path: path, Conns: conns}
			// A short unrecorded run first, so the first baseline round does
			// not pay for cold caches and nginx's first accept burst.
			g, url := w.wrk(path)
			if _, err := g.Run(url, conns, time.Second); err != nil {
				return out, fmt.Errorf("%s, %d connections, warm-up: %w", path, conns, err)
			}
			for i, name := range schedule {
				round, err := overheadRound1(ctx, env, w, path, conns, cfg.Duration, name)
				if err != nil {
					return out, fmt.Errorf("%s, %d connections, round %d (%s): %w", path, conns, i+1, name, err)
				}
				res := round.Wrk
				slog.Info("round", "path", path, "conns", conns, "n", fmt.Sprintf("%d/%d", i+1, len(schedule)),
					"tool", name, "rps", int(res.RPS), "p99", res.P99, "errors", res.Errors,
					"tool_cpu", fmt.Sprintf("%.1f%%", 100*round.ToolCPU))
				r.Rounds = append(r.Rounds, round)
			}
			r.summarise()
			out = append(out, r)
		}
	}
	return out, nil
}

// summarise computes the ratios and the tools' median CPU from the rounds.
func (o *overheadResult) summarise() {
	var samples []rounds.Sample
	cpu := map[string][]float64{}
	for _, r := range o.Rounds {
		samples = append(samples, rounds.Sample{Tool: r.Tool, RPS: r.Wrk.RPS,
			P99: float64(r.Wrk.P99) / float64(time.Microsecond)})
		cpu[r.Tool] = append(cpu[r.Tool], r.ToolCPU)
	}
	o.Ratios = rounds.Ratios(samples)
	o.ToolCPU = map[string]float64{}
	for t, vs := range cpu {
		o.ToolCPU[t] = rounds.SpreadOf(vs).Median
	}
}

// overheadRound1 runs one round: the tool started and attached, then wrk.
func overheadRound1(ctx context.Context, env tool.Env, w *workload, path string, conns int, d time.Duration, name string) (overheadRound, error) {
	r := overheadRound{Tool: name}
	tools, err := tool.Lookup([]string{name})
	if err != nil {
		return r, err
	}
	run, err := tool.Start(ctx, env, tools[0], nil)
	if err != nil {
		return r, err
	}
	defer run.Stop()
	if err := ctx.Err(); err != nil {
		return r, err
	}
	var cpu0 time.Duration
	if run.Pid() != 0 {
		if cpu0, err = proc.CPUTime(run.Pid()); err != nil {
			return r, err
		}
	}
	start := time.Now()
	g, url := w.wrk(path)
	if r.Wrk, err = g.Run(url, conns, d); err != nil {
		return r, err
	}
	if run.Pid() != 0 {
		cpu1, err := proc.CPUTime(run.Pid())
		if err != nil {
			return r, fmt.Errorf("%s exited during the round: %w", name, err)
		}
		r.ToolCPU = (cpu1 - cpu0).Seconds() / time.Since(start).Seconds()
	}
	return r, nil
}
