// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cilium/ebpf"

	"github.com/stacktop/stacktop/bench/internal/bpfobj"
	"github.com/stacktop/stacktop/bench/internal/httpload"
	"github.com/stacktop/stacktop/bench/internal/tool"
)

type costResult struct {
	Workload string          `json:"workload"` // keepalive or close
	Tool     string          `json:"tool"`
	Wrk      httpload.Result `json:"wrk"`
	Programs []bpfobj.Cost   `json:"programs"`
	// BPFShare is the run time of all the tool's programs per second of
	// wall time: the fraction of one CPU they consumed.
	BPFShare float64 `json:"bpf_share"`
}

// runCost loads the HTTP server over loopback at the first connection
// count with each workload while each tool runs, with run-time statistics
// on, and reports what every program of the tool cost per invocation.
func runCost(ctx context.Context, cfg config, env tool.Env, w *workload) ([]costResult, error) {
	stats, err := bpfobj.EnableStats()
	if err != nil {
		return nil, err
	}
	defer stats.Close()
	tools, err := tool.Lookup(cfg.Tools)
	if err != nil {
		return nil, err
	}
	var out []costResult
	for _, load := range cfg.Workloads {
		floor, err := costOfEmpty(cfg, w, load)
		if err != nil {
			return out, err
		}
		out = append(out, floor)
		for _, t := range tools {
			r, err := costOf(ctx, cfg, env, w, load, t)
			if err != nil {
				return out, fmt.Errorf("%s, %s: %w", load, t.Name, err)
			}
			slog.Info("cost", "workload", load, "tool", t.Name, "programs", len(r.Programs), "bpf_share", fmt.Sprintf("%.2f%%", 100*r.BPFShare))
			out = append(out, r)
		}
	}
	return out, nil
}

func costOf(ctx context.Context, cfg config, env tool.Env, w *workload, load string, t tool.Tool) (costResult, error) {
	run, err := tool.Start(ctx, env, t, nil)
	if err != nil {
		return costResult{}, err
	}
	defer run.Stop()
	held, err := bpfobj.HeldBy(run.Pid())
	if err != nil {
		return costResult{}, err
	}
	return costUnderLoad(cfg, w, load, t.Name, held.Progs)
}

// floorTool names the empty program's row in the results.
const floorTool = "empty program"

// costOfEmpty measures an empty program on a tracepoint every received
// packet passes (netif_receive_skb): the floor of any program's cost.
func costOfEmpty(cfg config, w *workload, load string) (costResult, error) {
	e, err := bpfobj.AttachEmpty("netif_receive_skb")
	if err != nil {
		return costResult{}, err
	}
	defer e.Close()
	id, err := e.ID()
	if err != nil {
		return costResult{}, err
	}
	return costUnderLoad(cfg, w, load, floorTool, []ebpf.ProgramID{id})
}

// costUnderLoad runs the loopback load and reads what progs cost meanwhile.
func costUnderLoad(cfg config, w *workload, load, name string, progs []ebpf.ProgramID) (costResult, error) {
	r := costResult{Workload: load, Tool: name}
	before, err := bpfobj.Stats(progs)
	if err != nil {
		return r, err
	}
	start := time.Now()
	g, url := w.wrk("loopback", load)
	if r.Wrk, err = g.Run(url, cfg.Conns[0], cfg.Duration); err != nil {
		return r, err
	}
	after, err := bpfobj.Stats(progs)
	if err != nil {
		return r, err
	}
	window := time.Since(start)
	r.Programs = bpfobj.Costs(before, after, window)
	var total time.Duration
	for _, p := range r.Programs {
		total += p.Runtime
	}
	r.BPFShare = total.Seconds() / window.Seconds()
	return r, nil
}
