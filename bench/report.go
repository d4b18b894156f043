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
		b.WriteString("`close` is one connection per request (wrk sends `Connection: close`), `keepalive` reuses each connection for every request.\n\n")
		b.WriteString("| workload | path | conns | tool | rounds | req/s ratio | p99 ratio | req/s | p99 | tool CPU |\n|---|---|---:|---|---:|---|---|---:|---:|---:|\n")
		for _, o := range res.Overhead {
			for _, r := range o.Ratios {
				cpu := "–"
				if r.Tool != rounds.Baseline {
					cpu = fmt.Sprintf("%.1f%%", 100*o.ToolCPU[r.Tool])
				}
				fmt.Fprintf(&b, "| %s | %s | %d | %s | %d | %s | %s | %.0f | %s | %s |\n", o.Workload, o.Path, o.Conns, r.Tool, r.AbsRPS.N,
					ratio(r.RPSCI, r.RPS), ratio(r.P99CI, r.P99), r.AbsRPS.Median, us(r.AbsP99.Median), cpu)
			}
		}
		b.WriteString("\n")
		for _, o := range res.Overhead {
			if o.Stopped != "" { // results.json of an earlier version has no reason
				fmt.Fprintf(&b, "%s, %s, %d connections: %d rounds; stopped: %s.\n", o.Workload, o.Path, o.Conns, len(o.Rounds), o.Stopped)
			}
		}
		b.WriteString("\n")
	}

	if len(res.Cost) > 0 {
		renderCost(&b, cfg, res.Cost)
	}

	if len(res.UserSpace) > 0 || len(res.Churn) > 0 {
		b.WriteString("### User space: `stacktop stream --format json --interval 1s`\n\n")
		b.WriteString("| idle connections | network namespaces | output | CPU (% of one core) | max RSS | our records/s | lost | map full |\n|---:|---:|---|---:|---:|---:|---:|---:|\n")
		for _, u := range res.UserSpace {
			fmt.Fprintf(&b, "| %d | %d | %s | %.2f%% | %.1f MiB | %.0f | %d | %d |\n", u.Conns, max(1, u.Namespaces), u.Output, 100*u.CPU, mib(u.RSSMax),
				u.RecordsPerSec, u.Loss.Lost, u.Loss.MapFull)
		}
		if len(res.Churn) > 0 {
			b.WriteString("\n#### Churn: connections opened and closed on loopback\n\n")
			b.WriteString("`stream` prints JSON at a 1 s refresh, read by the harness; `serve` runs with its defaults, scraped every second. ")
			b.WriteString("Each connection is two sockets (both ends are local), so a closed connection is two closed records.\n\n")
			b.WriteString("| tool | asked/s | achieved/s | opened | failed | behind | CPU (% of one core) | max RSS | new records | closed records | lost | map full |\n")
			b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
			for _, c := range res.Churn {
				records := "– | –" // serve prints no records
				if c.Tool == "stream" {
					records = fmt.Sprintf("%d | %d", c.New, c.Closed)
				}
				fmt.Fprintf(&b, "| %s | %d | %.0f | %d | %d | %d | %.2f%% | %.1f MiB | %s | %d | %d |\n", c.Tool, c.Rate, c.Achieved,
					c.Load.Opened, c.Load.Failed, c.Load.Behind, 100*c.CPU, mib(c.RSSMax), records, c.Loss.Lost, c.Loss.MapFull)
			}
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

// renderCost renders the cost suite: every program's cost per run, then
// each tool's BPF time per request next to its floor, by workload.
func renderCost(b *strings.Builder, cfg config, costs []costResult) {
	fmt.Fprintf(b, "### Cost per event (BPF run-time statistics, loopback load, %d connections)\n\n", cfg.Conns[0])
	b.WriteString("`above floor` subtracts what an empty program costs per run here (accounting and dispatch), measured under the same workload.\n\n")
	b.WriteString("| workload | tool | program | type | runs/s | ns/run | above floor | insns | verified insns |\n|---|---|---|---|---:|---:|---:|---:|---:|\n")
	for _, c := range costs {
		floor := floorNsPerRun(costs, c.Workload)
		for _, p := range c.Programs {
			fmt.Fprintf(b, "| %s | %s | %s | %s | %.0f | %.0f | %.0f | %d | %d |\n", c.Workload, c.Tool, p.Name, p.Type, p.RunsPerSec,
				p.NsPerRun, p.NsPerRun-floor, p.Size, p.Verified)
		}
		if len(c.Programs) > 1 {
			runs, ns := weighted(c)
			fmt.Fprintf(b, "| %s | **%s** | **all** | | **%.0f** | **%.0f** | **%.0f** | | CPU in BPF: **%.2f%%** of one core |\n",
				c.Workload, c.Tool, runs, ns, ns-floor, 100*c.BPFShare)
		}
	}
	b.WriteString("\n#### BPF time per request\n\n")
	b.WriteString("From the same cost rounds, with run-time statistics on (the overhead rounds run without them, so their ratios do not pay ")
	b.WriteString("for the accounting): the run time of all the tool's programs divided by the requests wrk completed meanwhile, ")
	b.WriteString("and the floor, an empty program's ns per run times the tool's program runs per request: ")
	b.WriteString("what the same number of runs would cost if every program did nothing, the physical limit on this machine. ")
	b.WriteString("Under `close` every request is a connection of its own, so these are also the figures per connection. ")
	b.WriteString("Programs on global hooks also run for other traffic on the host, which counts here too.\n\n")
	b.WriteString("| workload | tool | requests | program runs per request | BPF ns per request | floor ns per request | above floor |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, c := range costs {
		if c.Tool == floorTool || c.Wrk.Requests == 0 {
			continue
		}
		floor := floorNsPerRun(costs, c.Workload)
		runs, ns := perRequest(c)
		fmt.Fprintf(b, "| %s | %s | %d | %.2f | %.0f | %.0f | %.0f |\n", c.Workload, c.Tool, c.Wrk.Requests, runs, ns, runs*floor, ns-runs*floor)
	}
	b.WriteString("\n")
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

// floorNsPerRun is the empty program's ns per run under workload, 0 if
// not measured.
func floorNsPerRun(costs []costResult, workload string) float64 {
	for _, c := range costs {
		if c.Tool == floorTool && c.Workload == workload {
			_, ns := weighted(c)
			return ns
		}
	}
	return 0
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
