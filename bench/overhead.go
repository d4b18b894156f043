package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/stacktop/stacktop/bench/internal/httpload"
	"github.com/stacktop/stacktop/bench/internal/rounds"
	"github.com/stacktop/stacktop/bench/internal/tool"
)

type overheadResult struct {
	Path   string          `json:"path"`
	Conns  int             `json:"conns"`
	Rounds []overheadRound `json:"rounds"`
	Ratios []rounds.Ratio  `json:"ratios"`
}

type overheadRound struct {
	Tool string          `json:"tool"`
	Wrk  httpload.Result `json:"wrk"`
}

// runOverhead runs, for every path and connection count, the interleaved
// schedule of baseline and tool rounds.
func runOverhead(ctx context.Context, cfg config, env tool.Env, w *workload) ([]overheadResult, error) {
	var out []overheadResult
	schedule := rounds.Schedule(cfg.Tools, cfg.Rounds)
	for _, path := range cfg.Paths {
		for _, conns := range cfg.Conns {
			r := overheadResult{Path: path, Conns: conns}
			var samples []rounds.Sample
			for i, name := range schedule {
				res, err := overheadRound1(ctx, env, w, path, conns, cfg.Duration, name)
				if err != nil {
					return out, fmt.Errorf("%s, %d connections, round %d (%s): %w", path, conns, i+1, name, err)
				}
				slog.Info("round", "path", path, "conns", conns, "n", fmt.Sprintf("%d/%d", i+1, len(schedule)),
					"tool", name, "rps", int(res.RPS), "p99", res.P99, "errors", res.Errors)
				r.Rounds = append(r.Rounds, overheadRound{Tool: name, Wrk: res})
				samples = append(samples, rounds.Sample{Tool: name, RPS: res.RPS,
					P99: float64(res.P99) / float64(time.Microsecond)})
			}
			r.Ratios = rounds.Ratios(samples)
			out = append(out, r)
		}
	}
	return out, nil
}

// overheadRound1 runs one round: the tool started and attached, then wrk.
func overheadRound1(ctx context.Context, env tool.Env, w *workload, path string, conns int, d time.Duration, name string) (httpload.Result, error) {
	tools, err := tool.Lookup([]string{name})
	if err != nil {
		return httpload.Result{}, err
	}
	run, err := tool.Start(ctx, env, tools[0], nil)
	if err != nil {
		return httpload.Result{}, err
	}
	defer run.Stop()
	if err := ctx.Err(); err != nil {
		return httpload.Result{}, err
	}
	g, url := w.wrk(path)
	res, err := g.Run(url, conns, d)
	if err != nil {
		return res, err
	}
	select {
	case <-run.Exited():
		return res, fmt.Errorf("%s exited during the round", name)
	default:
	}
	return res, nil
}
