package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/stacktop/stacktop/bench/internal/rounds"
)

// renderMarkdown renders the results as the tables docs/BENCHMARKS.md
// shows, followed by the targets, each marked met or missed.
func renderMarkdown(res *results) string {
	cfg := res.Config
	var b strings.Builder
	m := res.Machine
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %d MiB, Linux %s; %s.\n", m.CPUs, m.Model, m.MemMiB, m.Kernel, m.Version)
	fmt.Fprintf(&b, "Run: `%s` started %s, took %s.\n", res.Command, res.Started.UTC().Format(time.RFC3339), res.Elapsed.Round(time.Second))
	if len(res.LeftOut) > 0 {
		fmt.Fprintf(&b, "Left out, not in this stacktop build: %s.\n", strings.Join(res.LeftOut, ", "))
	}
	b.WriteString("\n")

	if len(res.Overhead) > 0 {
		fmt.Fprintf(&b, "### Overhead on nginx (wrk, %s per round, %d rounds per tool)\n\n", cfg.Duration, cfg.Rounds)
		b.WriteString("Ratios are each tool round over the mean of the baseline rounds before and after it: median [min–max]. ")
		b.WriteString("The `none` row compares each baseline round with its neighbours: the noise floor.\n\n")
		b.WriteString("| path | conns | tool | req/s ratio | p99 ratio | req/s | p99 | tool CPU |\n|---|---:|---|---|---|---:|---:|---:|\n")
		for _, o := range res.Overhead {
			for _, r := range o.Ratios {
				cpu := "–"
				if r.Tool != rounds.Baseline {
					cpu = fmt.Sprintf("%.1f%%", 100*o.ToolCPU[r.Tool])
				}
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %.0f | %s | %s |\n", o.Path, o.Conns, r.Tool,
					ratio(r.RPS), ratio(r.P99), r.AbsRPS.Median, us(r.AbsP99.Median), cpu)
			}
		}
		b.WriteString("\n")
	}

	if len(res.Cost) > 0 {
		b.WriteString("### Cost per event (BPF run-time statistics, loopback load)\n\n")
		floor := 0.0
		for _, c := range res.Cost {
			if c.Tool == floorTool {
				_, floor = weighted(c)
			}
		}
		fmt.Fprintf(&b, "`above floor` subtracts the %.0f ns an empty program costs per run here (accounting and dispatch).\n\n", floor)
		b.WriteString("| tool | program | type | runs/s | ns/run | above floor | insns | verified insns |\n|---|---|---|---:|---:|---:|---:|---:|\n")
		for _, c := range res.Cost {
			for _, p := range c.Programs {
				fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.0f | %.0f | %d | %d |\n", c.Tool, p.Name, p.Type, p.RunsPerSec,
					p.NsPerRun, p.NsPerRun-floor, p.Size, p.Verified)
			}
			if len(c.Programs) > 1 {
				runs, ns := weighted(c)
				fmt.Fprintf(&b, "| **%s** | **all** | | **%.0f** | **%.0f** | **%.0f** | | CPU in BPF: **%.2f%%** of one core |\n",
					c.Tool, runs, ns, ns-floor, 100*c.BPFShare)
			}
		}
		b.WriteString("\n")
	}

	if len(res.UserSpace) > 0 || res.Churn != nil {
		b.WriteString("### User space: `stacktop stream --format json --interval 1s`\n\n")
		b.WriteString("| idle connections | output | CPU (% of one core) | max RSS | our records/s | lost | map full |\n|---:|---|---:|---:|---:|---:|---:|\n")
		for _, u := range res.UserSpace {
			fmt.Fprintf(&b, "| %d | %s | %.2f%% | %.1f MiB | %.0f | %d | %d |\n", u.Conns, u.Output, 100*u.CPU, mib(u.RSSMax),
				u.RecordsPerSec, u.Loss.Lost, u.Loss.MapFull)
		}
		if c := res.Churn; c != nil {
			fmt.Fprintf(&b, "\nChurn: %d connections/s asked, %.0f/s achieved (%d opened and closed, %d failed, %d behind) over %s: "+
				"stream CPU %.2f%% of one core, max RSS %.1f MiB; %d `closed` records about them (%d sockets: both ends are local), "+
				"%d `new`; lost %d, map full %d.\n",
				c.Rate, c.Achieved, c.Load.Opened, c.Load.Failed, c.Load.Behind, c.Load.Elapsed.Round(time.Second),
				100*c.CPU, mib(c.RSSMax), c.Closed, 2*c.Load.Opened, c.New, c.Loss.Lost, c.Loss.MapFull)
		}
		b.WriteString("\n")
	}

	if len(res.Startup) > 0 {
		fmt.Fprintf(&b, "### Start-up (%d runs each)\n\n", startupRuns)
		b.WriteString("| command | exec → first report | maps locked | programs locked |\n|---|---|---:|---:|\n")
		for _, s := range res.Startup {
			fmt.Fprintf(&b, "| %s | %.0f ms [%.0f–%.0f] | %.1f KiB in %d maps | %.1f KiB in %d programs |\n", s.Tool,
				s.FirstReport.Median, s.FirstReport.Min, s.FirstReport.Max,
				float64(s.Memlock.Maps)/1024, s.Memlock.NMaps, float64(s.Memlock.Progs)/1024, s.Memlock.NProgs)
		}
		b.WriteString("\n")
	}

	if t := targets(res); len(t) > 0 {
		b.WriteString("### Targets (issue 7)\n\n| target | measured | |\n|---|---|---|\n")
		for _, row := range t {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", row.target, row.measured, row.verdict())
		}
	}
	return b.String()
}

func ratio(s rounds.Spread) string {
	if s.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f [%.3f–%.3f]", s.Median, s.Min, s.Max)
}

func us(v float64) string {
	return (time.Duration(v * float64(time.Microsecond))).Round(time.Microsecond).String()
}

func mib(bytes uint64) float64 { return float64(bytes) / (1 << 20) }

// weighted returns a tool's total invocations per second and its average
// run time per invocation over all its programs.
func weighted(c costResult) (runsPerSec, nsPerRun float64) {
	var runs uint64
	var t time.Duration
	for _, p := range c.Programs {
		runs += p.Runs
		t += p.Runtime
		runsPerSec += p.RunsPerSec
	}
	if runs > 0 {
		nsPerRun = float64(t.Nanoseconds()) / float64(runs)
	}
	return runsPerSec, nsPerRun
}

type targetRow struct {
	target, measured string
	met              bool
	// noise, when set, says why the run cannot tell: the baseline rounds
	// differ from each other by more than the target's tolerance.
	noise string
}

func (t targetRow) verdict() string {
	switch {
	case t.noise != "":
		return "inconclusive: " + t.noise
	case t.met:
		return "met"
	}
	return "**missed**"
}

// judgeRatio fills in a ratio target: inconclusive when the noise floor is
// wider than the tolerance the target allows.
func judgeRatio(target string, got float64, met bool, tolerance, noise float64) targetRow {
	row := targetRow{target: target, measured: pct(got), met: met}
	switch {
	case noise < 0:
		row.noise = "too few baseline rounds to know the noise floor"
	case noise > tolerance:
		row.noise = fmt.Sprintf("baseline rounds typically differ by %.1f%%", 100*noise)
	}
	return row
}

// targets checks the results against the targets. Ratios are
// judged on their median over rounds.
func targets(res *results) []targetRow {
	var out []targetRow
	limits := map[string]float64{"latency": 0.99, "stream": 0.98, "serve": 0.98}
	for _, o := range res.Overhead {
		var base rounds.Ratio
		for _, r := range o.Ratios {
			if r.Tool == rounds.Baseline {
				base = r
			}
		}
		for _, r := range o.Ratios {
			min, ok := limits[r.Tool]
			if !ok || r.RPS.N == 0 {
				continue
			}
			where := fmt.Sprintf("%s %s, %d conns", r.Tool, o.Path, o.Conns)
			out = append(out,
				judgeRatio(where+": req/s ≥ "+pct(min), r.RPS.Median, r.RPS.Median >= min, 1-min, base.RPSNoise),
				judgeRatio(where+": p99 ≤ 105%", r.P99.Median, r.P99.Median <= 1.05, 0.05, base.P99Noise))
		}
	}
	for _, c := range res.Cost {
		if c.Tool == "latency" {
			_, ns := weighted(c)
			out = append(out, targetRow{target: "latency: ≤ 150 ns per program invocation",
				measured: fmt.Sprintf("%.0f ns", ns), met: ns <= 150})
		}
	}
	for _, u := range res.UserSpace {
		switch u.Conns {
		case 10000:
			out = append(out,
				targetRow{target: "stream at 10,000 connections, output " + u.Output + ": ≤ 2% of one core",
					measured: fmt.Sprintf("%.2f%%", 100*u.CPU), met: u.CPU <= 0.02},
				targetRow{target: "stream at 10,000 connections, output " + u.Output + ": ≤ 100 MiB RSS",
					measured: fmt.Sprintf("%.1f MiB", mib(u.RSSMax)), met: u.RSSMax <= 100<<20})
		case 100000:
			// Loss counters must have been seen, or "0 lost" means nothing.
			seen := fmt.Sprintf("%d lost, %d map full (%d reports)", u.Loss.Lost, u.Loss.MapFull, u.Loss.Reports)
			out = append(out, targetRow{target: "100,000 connections tracked without lost events, output " + u.Output,
				measured: seen, met: u.Loss.Lost == 0 && u.Loss.MapFull == 0 && u.Loss.Reports > 0})
		}
	}
	return out
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
