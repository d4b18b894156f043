// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/stacktop/stacktop/bench/internal/rounds"
)

// renderMarkdown renders the results as the tables docs/PERFORMANCE.md
// shows, followed by the budgets, each met, missed or inconclusive.
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
		fmt.Fprintf(&b, "### Overhead on nginx (wrk, %s per round, %d to %d rounds per tool)\n\n", cfg.Duration, cfg.Rounds, cfg.MaxRounds)
		b.WriteString("Ratios are each tool round over the mean of the baseline rounds before and after it: ")
		fmt.Fprintf(&b, "mean ± half-width of its %.0f%% t-interval over the rounds, then the range of the rounds. ", 100*rounds.Level)
		b.WriteString("The `none` row compares each inner baseline round with its neighbours: its range is the noise band. ")
		fmt.Fprintf(&b, "Rounds were added while a ratio's half-width exceeded ±%.1f%% and its target was undecided.\n\n", 100*cfg.Precision)
		b.WriteString("| path | conns | tool | rounds | req/s ratio | p99 ratio | req/s | p99 | tool CPU |\n|---|---:|---|---:|---|---|---:|---:|---:|\n")
		for _, o := range res.Overhead {
			for _, r := range o.Ratios {
				cpu := "–"
				if r.Tool != rounds.Baseline {
					cpu = fmt.Sprintf("%.1f%%", 100*o.ToolCPU[r.Tool])
				}
				fmt.Fprintf(&b, "| %s | %d | %s | %d | %s | %s | %.0f | %s | %s |\n", o.Path, o.Conns, r.Tool, r.AbsRPS.N,
					ratio(r.RPSCI, r.RPS), ratio(r.P99CI, r.P99), r.AbsRPS.Median, us(r.AbsP99.Median), cpu)
			}
		}
		b.WriteString("\n")
		for _, o := range res.Overhead {
			if o.Stopped != "" { // results.json of an earlier version has no reason
				fmt.Fprintf(&b, "%s, %d connections: %d rounds; stopped: %s.\n", o.Path, o.Conns, len(o.Rounds), o.Stopped)
			}
		}
		b.WriteString("\n")
	}

	if len(res.Cost) > 0 {
		floor := floorNsPerRun(res.Cost)
		fmt.Fprintf(&b, "### Cost per event (BPF run-time statistics, loopback load, %d connections)\n\n", cfg.Conns[0])
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
		b.WriteString("\n#### BPF time per request\n\n")
		b.WriteString("From the same cost rounds, with run-time statistics on (the overhead rounds run without them, so their ratios do not pay ")
		b.WriteString("for the accounting): the run time of all the tool's programs divided by the requests wrk completed meanwhile, ")
		fmt.Fprintf(&b, "and the floor, the %.0f ns of an empty program times the tool's program runs per request: ", floor)
		b.WriteString("what the same number of runs would cost if every program did nothing, the physical limit on this machine. ")
		b.WriteString("Programs on global hooks also run for other traffic on the host, which counts here too.\n\n")
		b.WriteString("| tool | requests | program runs per request | BPF ns per request | floor ns per request | above floor |\n|---|---:|---:|---:|---:|---:|\n")
		for _, c := range res.Cost {
			if c.Tool == floorTool || c.Wrk.Requests == 0 {
				continue
			}
			runs, ns := perRequest(c)
			fmt.Fprintf(&b, "| %s | %d | %.2f | %.0f | %.0f | %.0f |\n", c.Tool, c.Wrk.Requests, runs, ns, runs*floor, ns-runs*floor)
		}
		b.WriteString("\n")
	}

	if len(res.UserSpace) > 0 || res.Churn != nil {
		b.WriteString("### User space: `stacktop stream --format json --interval 1s`\n\n")
		b.WriteString("| idle connections | network namespaces | output | CPU (% of one core) | max RSS | our records/s | lost | map full |\n|---:|---:|---|---:|---:|---:|---:|---:|\n")
		for _, u := range res.UserSpace {
			fmt.Fprintf(&b, "| %d | %d | %s | %.2f%% | %.1f MiB | %.0f | %d | %d |\n", u.Conns, max(1, u.Namespaces), u.Output, 100*u.CPU, mib(u.RSSMax),
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
		fmt.Fprintf(&b, "### Targets\n\nA ratio's target is met when its %.0f%% interval lies entirely within it, missed when entirely beyond it ", 100*rounds.Level)
		b.WriteString("or when every round lies beyond it by more than the baseline's noise band, inconclusive otherwise.\n\n")
		b.WriteString("| target | measured | |\n|---|---|---|\n")
		for _, row := range t {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", row.target, row.measured, row)
		}
	}
	return b.String()
}

// ratio shows a ratio's mean ± half-width and the range of its rounds.
func ratio(iv rounds.Interval, s rounds.Spread) string {
	if s.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%s (%.3f–%.3f)", interval(iv), s.Min, s.Max)
}

// interval shows mean ± half-width, or the mean alone of a single round.
func interval(iv rounds.Interval) string {
	switch {
	case iv.N == 0:
		return "–"
	case !iv.Defined():
		return fmt.Sprintf("%.3f (1 round)", iv.Mean)
	}
	return fmt.Sprintf("%.3f ± %.3f", iv.Mean, iv.HalfWidth)
}

func us(v float64) string {
	return (time.Duration(v * float64(time.Microsecond))).Round(time.Microsecond).String()
}

func mib(bytes uint64) float64 { return float64(bytes) / (1 << 20) }

// weighted returns a tool's total invocations per second and its average
// run time per invocation over all its programs.
func weighted(c costResult) (runsPerSec, nsPerRun float64) {
	runs, t := totals(c)
	for _, p := range c.Programs {
		runsPerSec += p.RunsPerSec
	}
	if runs > 0 {
		nsPerRun = float64(t.Nanoseconds()) / float64(runs)
	}
	return runsPerSec, nsPerRun
}

// perRequest returns a tool's program runs and BPF run time (ns) per
// request wrk completed in the same window.
func perRequest(c costResult) (runs, ns float64) {
	n, t := totals(c)
	req := float64(c.Wrk.Requests)
	return float64(n) / req, float64(t.Nanoseconds()) / req
}

func totals(c costResult) (runs uint64, runtime time.Duration) {
	for _, p := range c.Programs {
		runs += p.Runs
		runtime += p.Runtime
	}
	return runs, runtime
}

// floorNsPerRun is the empty program's ns per run, 0 if not measured.
func floorNsPerRun(costs []costResult) float64 {
	for _, c := range costs {
		if c.Tool == floorTool {
			_, ns := weighted(c)
			return ns
		}
	}
	return 0
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
