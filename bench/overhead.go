// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/stacktop/stacktop/bench/internal/httpload"
	"github.com/stacktop/stacktop/bench/internal/proc"
	"github.com/stacktop/stacktop/bench/internal/rounds"
	"github.com/stacktop/stacktop/bench/internal/tool"
)

type overheadResult struct {
	Workload string          `json:"workload"` // keepalive or close
	Path     string          `json:"path"`
	Conns    int             `json:"conns"`
	Rounds   []overheadRound `json:"rounds"`
	Ratios   []rounds.Ratio  `json:"ratios"`
	// Judged are the targets of the tools that have one, decided from the
	// ratios' intervals and the baseline's noise band.
	Judged []judged `json:"judged"`
	// Stopped says why no more rounds were added.
	Stopped string `json:"stopped"`
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
	// Wall is the round's whole time, tool start and stop included.
	Wall time.Duration `json:"wall_ns"`
}

// Why the rounds of a path and connection count stopped.
const (
	stoppedSettled = "every ratio within the precision or its target decided"
	stoppedRounds  = "maximum rounds reached"
	stoppedBudget  = "time budget spent"
)

// runOverhead runs, for every workload, path and connection count, the interleaved
// schedule of baseline and tool rounds: the minimum rounds of every tool,
// then more rounds of the tools whose ratios still need them, each followed
// by a baseline round, until none does, the maximum rounds are reached or
// the configuration's share of the time budget is spent. Time one
// configuration leaves unused goes to the next.
func runOverhead(ctx context.Context, cfg config, env tool.Env, w *workload) ([]overheadResult, error) {
	var out []overheadResult
	start := time.Now()
	configs := len(cfg.Workloads) * len(cfg.Paths) * len(cfg.Conns)
	for _, load := range cfg.Workloads {
		for _, path := range cfg.Paths {
			for _, conns := range cfg.Conns {
				deadline := start.Add(cfg.overheadBudget() * time.Duration(len(out)+1) / time.Duration(configs))
				r, err := runOverheadConfig(ctx, cfg, env, w, overheadResult{Workload: load, Path: path, Conns: conns}, deadline)
				out = append(out, r)
				if err != nil {
					return out, err
				}
			}
		}
	}
	return out, nil
}

// runOverheadConfig runs the rounds of one workload, path and connection
// count until deadline.
func runOverheadConfig(ctx context.Context, cfg config, env tool.Env, w *workload, r overheadResult, deadline time.Time) (overheadResult, error) {
	load, path, conns := r.Workload, r.Path, r.Conns
	// A short unrecorded run first, so the first baseline round does
	// not pay for cold caches and nginx's first accept burst.
	g, url := w.wrk(path, load)
	if _, err := g.Run(url, conns, time.Second); err != nil {
		return r, fmt.Errorf("%s, %s, %d connections, warm-up: %w", load, path, conns, err)
	}
	run := func(name string) error {
		began := time.Now()
		round, err := overheadRound1(ctx, env, w, load, path, conns, cfg.Duration, name)
		round.Wall = time.Since(began)
		if err != nil {
			return fmt.Errorf("%s, %s, %d connections, round %d (%s): %w", load, path, conns, len(r.Rounds)+1, name, err)
		}
		res := round.Wrk
		slog.Info("round", "workload", load, "path", path, "conns", conns, "n", len(r.Rounds)+1,
			"tool", name, "rps", int(res.RPS), "p99", res.P99, "errors", res.Errors,
			"tool_cpu", fmt.Sprintf("%.1f%%", 100*round.ToolCPU))
		r.Rounds = append(r.Rounds, round)
		return nil
	}
	for _, name := range rounds.Schedule(cfg.Tools, cfg.Rounds) {
		if err := run(name); err != nil {
			return r, err
		}
	}
	r.Stopped = stoppedRounds
more:
	for rep := cfg.Rounds; rep < cfg.MaxRounds; rep++ {
		r.summarise()
		needy := r.needMore(cfg.Tools, rep, cfg.Precision)
		if len(needy) == 0 {
			r.Stopped = stoppedSettled
			break
		}
		for _, name := range needy {
			if time.Now().Add(r.pairTime()).After(deadline) {
				r.Stopped = stoppedBudget
				break more
			}
			for _, n := range []string{name, rounds.Baseline} {
				if err := run(n); err != nil {
					return r, err
				}
			}
		}
	}
	r.summarise()
	slog.Info("rounds stopped", "workload", load, "path", path, "conns", conns, "why", r.Stopped, "rounds", len(r.Rounds))
	return r, nil
}

// needMore returns the tools whose ratios still need rounds (see
// rounds.NeedsMore), those with targets first, each group in an order that
// rotates with rep, like the schedule's.
func (o *overheadResult) needMore(tools []string, rep int, precision float64) []string {
	var withTarget, without []string
	for i := range tools {
		name := tools[(i+rep)%len(tools)]
		r, ok := o.ratio(name)
		if !ok {
			continue
		}
		rps, p99 := o.verdict(name, "req/s"), o.verdict(name, "p99")
		_, has := toolTargets[o.Workload][name]
		if !rounds.NeedsMore(r.RPSCI, rps, has, precision) && !rounds.NeedsMore(r.P99CI, p99, has, precision) {
			continue
		}
		if has {
			withTarget = append(withTarget, name)
		} else {
			without = append(without, name)
		}
	}
	return append(withTarget, without...)
}

// pairTime is the mean time of a tool round plus a baseline round so far.
func (o *overheadResult) pairTime() time.Duration {
	var tools, bases, nt, nb time.Duration
	for _, r := range o.Rounds {
		if r.Tool == rounds.Baseline {
			bases, nb = bases+r.Wall, nb+1
		} else {
			tools, nt = tools+r.Wall, nt+1
		}
	}
	return tools/max(nt, 1) + bases/max(nb, 1)
}

func (o *overheadResult) ratio(name string) (rounds.Ratio, bool) {
	i := slices.IndexFunc(o.Ratios, func(r rounds.Ratio) bool { return r.Tool == name })
	if i < 0 {
		return rounds.Ratio{}, false
	}
	return o.Ratios[i], true
}

// summarise computes the ratios, the verdicts and the tools' median CPU
// from the rounds.
func (o *overheadResult) summarise() {
	var samples []rounds.Sample
	cpu := map[string][]float64{}
	for _, r := range o.Rounds {
		samples = append(samples, rounds.Sample{Tool: r.Tool, RPS: r.Wrk.RPS,
			P99: float64(r.Wrk.P99) / float64(time.Microsecond)})
		cpu[r.Tool] = append(cpu[r.Tool], r.ToolCPU)
	}
	o.Ratios = rounds.Ratios(samples)
	o.Judged = judge(o.Workload, o.Ratios)
	o.ToolCPU = map[string]float64{}
	for t, vs := range cpu {
		o.ToolCPU[t] = rounds.SpreadOf(vs).Median
	}
}

// overheadRound1 runs one round: the tool started and attached, then wrk.
func overheadRound1(ctx context.Context, env tool.Env, w *workload, load, path string, conns int, d time.Duration, name string) (overheadRound, error) {
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
	g, url := w.wrk(path, load)
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
