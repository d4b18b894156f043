// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/stacktop/stacktop/bench/internal/rounds"
)

// toolTarget is the budget a tool is held to in the overhead suite, on
// every path and at every connection count of a workload
// (docs/PERFORMANCE.md, Budgets).
type toolTarget struct {
	RPS, P99 rounds.Target
	Budget   string // the budget's name in docs/PERFORMANCE.md
	// Peer is the tool whose requests/s ratio this one must not fall below
	// by more than peerMargin in the same run; "" for none.
	Peer string
	// FloorOf: this is a floor tool (empty programs at the hooks of that
	// tool), held to that tool's targets. Missed, they are out of reach
	// of any program at those hooks on this machine.
	FloorOf string
}

// The budgets by workload.
var toolTargets = map[string]map[string]toolTarget{
	workloadKeepAlive: withFloors(map[string]toolTarget{
		"stream":       {RPS: rounds.Target{Limit: 0.97}, P99: rounds.Target{Limit: 1.10, AtMost: true}, Budget: "connections-overhead"},
		"serve":        {RPS: rounds.Target{Limit: 0.97}, P99: rounds.Target{Limit: 1.10, AtMost: true}, Budget: "connections-overhead"},
		"latency-read": {RPS: rounds.Target{Limit: 0.99}, P99: rounds.Target{Limit: 1.05, AtMost: true}, Budget: "latency-read-overhead"},
		"latency":      {RPS: rounds.Target{Limit: 0.95}, P99: rounds.Target{Limit: 1.10, AtMost: true}, Budget: "latency-overhead"},
	}),
	workloadClose: withFloors(map[string]toolTarget{
		"stream": {RPS: rounds.Target{Limit: 0.97}, P99: rounds.Target{Limit: 1.10, AtMost: true}, Budget: "short-connections", Peer: "bpftrace-tcptop"},
		"serve":  {RPS: rounds.Target{Limit: 0.97}, P99: rounds.Target{Limit: 1.10, AtMost: true}, Budget: "short-connections", Peer: "bpftrace-tcptop"},
	}),
}

// floors are the floor tools of the tools with targets.
var floors = map[string]string{"empty-stream": "stream", "empty-serve": "serve", "empty-read": "latency-read", "empty-latency": "latency"}

// peerMargin is how far below its peer's requests/s ratio a tool may be.
const peerMargin = 0.01

// withFloors adds each floor tool of a tool in targets with that tool's
// targets (a peer is a target of the tool, not of its floor).
func withFloors(targets map[string]toolTarget) map[string]toolTarget {
	for floor, of := range floors {
		if t, ok := targets[of]; ok {
			t.FloorOf, t.Peer = of, ""
			targets[floor] = t
		}
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

// judge decides the targets of the tools in ratios under workload, each
// against the noise band of the baseline's own ratios.
func judge(workload string, ratios []rounds.Ratio) []judged {
	var rpsBand, p99Band rounds.Band
	for _, r := range ratios {
		if r.Tool == rounds.Baseline {
			rpsBand, p99Band = rounds.BandOf(r.RPSRounds), rounds.BandOf(r.P99Rounds)
		}
	}
	var out []judged
	for _, r := range ratios {
		t, ok := toolTargets[workload][r.Tool]
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
		where := fmt.Sprintf("%s, %s, %d conns", o.Workload, o.Path, o.Conns)
		for _, j := range o.Judged {
			name := j.Tool
			if of := toolTargets[o.Workload][j.Tool].FloorOf; of != "" {
				name += " (" + of + "'s floor: missed means out of reach here)"
			}
			out = append(out, targetRow{
				target:   fmt.Sprintf("%s %s: %s ratio %s (%s)", name, where, j.Metric, j.Target, toolTargets[o.Workload][j.Tool].Budget),
				measured: interval(j.Interval), verdict: j.Verdict, why: j.Why})
		}
		out = append(out, o.peerRows(where)...)
	}
	for _, c := range res.Cost {
		floor := floorNsPerRun(res.Cost, c.Workload)
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
			target:   fmt.Sprintf("%s, %s: every program ≤ floor + %d ns per run (program-above-floor)", c.Tool, c.Workload, aboveFloorLimit),
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
			out = append(out, targetRow{target: "stream at 100,000 connections, output " + u.Output + ": ≤ 5% of one core at a 1 s refresh (stream-scale)",
				measured: fmt.Sprintf("%.2f%%", 100*u.CPU), verdict: metOrMissed(u.CPU <= 0.05)})
			out = append(out, noLoss("stream at 100,000 connections, output "+u.Output+" (stream-scale)", u.Loss))
		}
	}
	for _, c := range res.Churn {
		limit := map[string]float64{"stream": 0.10, "serve": 0.02}[c.Tool]
		what := fmt.Sprintf("%s at %.0f closed connections/s (churn-scale)", c.Tool, c.Achieved)
		out = append(out, targetRow{target: fmt.Sprintf("%s: ≤ %.0f%% of one core", what, 100*limit),
			measured: fmt.Sprintf("%.2f%%", 100*c.CPU), verdict: metOrMissed(c.CPU <= limit)})
		out = append(out, noLoss(what, c.Loss))
	}
	return out
}

// peerRows judges each tool that has a peer against the peer's requests/s
// ratio in the same rounds: met when the difference of the two means,
// widened by both half-widths, stays above −peerMargin; missed when even
// so it lies below.
func (o *overheadResult) peerRows(where string) []targetRow {
	var out []targetRow
	for name, t := range toolTargets[o.Workload] {
		tool, ok1 := o.ratio(name)
		peer, ok2 := o.ratio(t.Peer)
		if t.Peer == "" || !ok1 || !ok2 {
			continue
		}
		d := tool.RPSCI.Mean - peer.RPSCI.Mean
		hw := math.Hypot(tool.RPSCI.HalfWidth, peer.RPSCI.HalfWidth)
		v := rounds.Inconclusive
		switch {
		case !tool.RPSCI.Defined() || !peer.RPSCI.Defined():
		case d-hw >= -peerMargin:
			v = rounds.Met
		case d+hw < -peerMargin:
			v = rounds.Missed
		}
		out = append(out, targetRow{
			target:   fmt.Sprintf("%s %s: req/s ratio ≥ %s's − %.2f (%s)", name, where, t.Peer, peerMargin, t.Budget),
			measured: fmt.Sprintf("%+.3f ± %.3f", d, hw), verdict: v})
	}
	slices.SortFunc(out, func(a, b targetRow) int { return strings.Compare(a.target, b.target) })
	return out
}

// noLoss is the target that the tool lost nothing. Its loss counters must
// have been seen, or "0 lost" means nothing.
func noLoss(what string, l streamLoss) targetRow {
	return targetRow{target: what + ": nothing lost",
		measured: fmt.Sprintf("%d lost, %d map full (%d reports)", l.Lost, l.MapFull, l.Reports),
		verdict:  metOrMissed(l.Lost == 0 && l.MapFull == 0 && l.Reports > 0)}
}
