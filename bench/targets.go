// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"slices"

	"github.com/stacktop/stacktop/bench/internal/rounds"
)

// toolTarget is the budget a tool is held to in the overhead suite, on
// every path and at every connection count (docs/PERFORMANCE.md, Budgets).
type toolTarget struct {
	RPS, P99 rounds.Target
	Budget   string // the budget's name in docs/PERFORMANCE.md
	// FloorOf: this is a floor tool (empty programs at the hooks of that
	// tool), held to that tool's targets. Missed, they are out of reach
	// of any program at those hooks on this machine.
	FloorOf string
}

var toolTargets = withFloors(map[string]toolTarget{
	"stream":       {RPS: rounds.Target{Limit: 0.97}, P99: rounds.Target{Limit: 1.10, AtMost: true}, Budget: "connections-overhead"},
	"serve":        {RPS: rounds.Target{Limit: 0.97}, P99: rounds.Target{Limit: 1.10, AtMost: true}, Budget: "connections-overhead"},
	"latency-read": {RPS: rounds.Target{Limit: 0.99}, P99: rounds.Target{Limit: 1.05, AtMost: true}, Budget: "latency-read-overhead"},
	"latency":      {RPS: rounds.Target{Limit: 0.95}, P99: rounds.Target{Limit: 1.10, AtMost: true}, Budget: "latency-overhead"},
}, map[string]string{"empty-udp": "stream", "empty-serve": "serve", "empty-read": "latency-read", "empty-latency": "latency"})

// withFloors adds each floor tool with the targets of the tool it is the floor of.
func withFloors(targets map[string]toolTarget, floors map[string]string) map[string]toolTarget {
	for floor, of := range floors {
		t := targets[of]
		t.FloorOf = of
		targets[floor] = t
	}
	return targets
}

// aboveFloorLimit is the program-above-floor budget of every latency
// program: at most this many ns per run above the empty program's.
const aboveFloorLimit = 40

// judged is one tool's target on one ratio, decided.
type judged struct {
	Tool     string          `json:"tool"`
	Metric   string          `json:"metric"` // "req/s" or "p99"
	Target   rounds.Target   `json:"target"`
	Interval rounds.Interval `json:"interval"`
	Verdict  rounds.Verdict  `json:"verdict"`
	Why      string          `json:"why"`
}

// judge decides the targets of the tools in ratios, each against the noise
// band of the baseline's own ratios.
func judge(ratios []rounds.Ratio) []judged {
	var rpsBand, p99Band rounds.Band
	for _, r := range ratios {
		if r.Tool == rounds.Baseline {
			rpsBand, p99Band = rounds.BandOf(r.RPSRounds), rounds.BandOf(r.P99Rounds)
		}
	}
	var out []judged
	for _, r := range ratios {
		t, ok := toolTargets[r.Tool]
		if !ok {
			continue
		}
		for _, m := range []struct {
			metric string
			target rounds.Target
			ratios []float64
			iv     rounds.Interval
			band   rounds.Band
		}{
			{"req/s", t.RPS, r.RPSRounds, r.RPSCI, rpsBand},
			{"p99", t.P99, r.P99Rounds, r.P99CI, p99Band},
		} {
			v, why := rounds.Judge(m.target, m.ratios, m.iv, m.band)
			out = append(out, judged{Tool: r.Tool, Metric: m.metric, Target: m.target, Interval: m.iv, Verdict: v, Why: why})
		}
	}
	return out
}

// verdict is the decision on tool's metric, inconclusive if not judged.
func (o *overheadResult) verdict(tool, metric string) rounds.Verdict {
	i := slices.IndexFunc(o.Judged, func(j judged) bool { return j.Tool == tool && j.Metric == metric })
	if i < 0 {
		return rounds.Inconclusive
	}
	return o.Judged[i].Verdict
}

// targetRow is one line of the report's targets table.
type targetRow struct {
	target, measured string
	verdict          rounds.Verdict
	why              string // for a verdict from rounds: which rule decided it
}

func (t targetRow) String() string {
	v := string(t.verdict)
	if t.verdict == rounds.Missed {
		v = "**missed**"
	}
	if t.why != "" {
		v += " (" + t.why + ")"
	}
	return v
}

func metOrMissed(ok bool) rounds.Verdict {
	if ok {
		return rounds.Met
	}
	return rounds.Missed
}

// targets checks the results against the budgets.
func targets(res *results) []targetRow {
	var out []targetRow
	for _, o := range res.Overhead {
		for _, j := range o.Judged {
			name := j.Tool
			if of := toolTargets[j.Tool].FloorOf; of != "" {
				name += " (" + of + "'s floor: missed means out of reach here)"
			}
			out = append(out, targetRow{
				target: fmt.Sprintf("%s %s, %d conns: %s ratio %s (%s)", name, o.Path, o.Conns, j.Metric,
					j.Target, toolTargets[j.Tool].Budget),
				measured: interval(j.Interval), verdict: j.Verdict, why: j.Why})
		}
	}
	floor := floorNsPerRun(res.Cost)
	for _, c := range res.Cost {
		if c.Tool != "latency" && c.Tool != "latency-read" || len(c.Programs) == 0 {
			continue
		}
		worst := c.Programs[0]
		for _, p := range c.Programs {
			if p.NsPerRun > worst.NsPerRun {
				worst = p
			}
		}
		out = append(out, targetRow{
			target:   fmt.Sprintf("%s: every program ≤ floor + %d ns per run (program-above-floor)", c.Tool, aboveFloorLimit),
			measured: fmt.Sprintf("slowest %s: %.0f ns, floor + %.0f", worst.Name, worst.NsPerRun, worst.NsPerRun-floor),
			verdict:  metOrMissed(worst.NsPerRun-floor <= aboveFloorLimit)})
	}
	for _, u := range res.UserSpace {
		switch u.Conns {
		case 10000:
			out = append(out,
				targetRow{target: "stream at 10,000 connections, output " + u.Output + ": ≤ 2% of one core (stream-scale)",
					measured: fmt.Sprintf("%.2f%%", 100*u.CPU), verdict: metOrMissed(u.CPU <= 0.02)},
				targetRow{target: "stream at 10,000 connections, output " + u.Output + ": ≤ 100 MiB RSS (stream-scale)",
					measured: fmt.Sprintf("%.1f MiB", mib(u.RSSMax)), verdict: metOrMissed(u.RSSMax <= 100<<20)})
		case 100000:
			// Loss counters must have been seen, or "0 lost" means nothing.
			seen := fmt.Sprintf("%d lost, %d map full (%d reports)", u.Loss.Lost, u.Loss.MapFull, u.Loss.Reports)
			out = append(out, targetRow{target: "100,000 connections tracked without lost events, output " + u.Output + " (stream-scale)",
				measured: seen, verdict: metOrMissed(u.Loss.Lost == 0 && u.Loss.MapFull == 0 && u.Loss.Reports > 0)})
		}
	}
	return out
}
