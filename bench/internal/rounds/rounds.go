// SPDX-License-Identifier: Apache-2.0

// Package rounds interleaves tool rounds with baseline rounds (A/B/A/B…)
// and turns their results into ratios against the adjacent baselines, so
// that drift in the machine's speed over a run cancels out; then into
// confidence intervals over rounds, verdicts on targets, and the rule for
// when another round is worth running.
package rounds

import "slices"

// Baseline is the name of the no-tool round.
const Baseline = "none"

// Schedule returns the order of rounds: a baseline, then each tool followed
// by a baseline, repeated reps times. The tool order rotates from one
// repetition to the next so no tool always follows the same one.
func Schedule(tools []string, reps int) []string {
	out := []string{Baseline}
	for r := range reps {
		for i := range tools {
			out = append(out, tools[(i+r)%len(tools)], Baseline)
		}
	}
	return out
}

// Sample is the outcome of one round.
type Sample struct {
	Tool string  `json:"tool"`
	RPS  float64 `json:"rps"`
	P99  float64 `json:"p99_us"`
}

// Spread summarises a set of values.
type Spread struct {
	Median, Min, Max float64
	N                int
}

// SpreadOf summarises vs.
func SpreadOf(vs []float64) Spread {
	if len(vs) == 0 {
		return Spread{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// Ratio is one tool's results relative to the baseline.
type Ratio struct {
	Tool string
	// RPSRounds and P99Rounds are each round's value divided by the mean of
	// its neighbouring baselines, in the order the rounds ran.
	RPSRounds, P99Rounds []float64
	RPS, P99             Spread   // summaries of those
	RPSCI, P99CI         Interval // and the confidence intervals of their means
	AbsRPS               Spread   // absolute values, requests/s
	AbsP99               Spread   // absolute values, µs
}

// Ratios computes, for every tool in samples (in order of first
// appearance, baseline first), the ratio of each of its rounds to the mean
// of the baseline rounds adjacent to it. For the baseline itself the ratio
// compares each inner baseline round with its two neighbouring baselines,
// which shows how much the machine drifts between rounds: the noise floor.
func Ratios(samples []Sample) []Ratio {
	var order []string
	rps := map[string][]float64{}
	p99 := map[string][]float64{}
	absRPS := map[string][]float64{}
	absP99 := map[string][]float64{}
	for i, s := range samples {
		if !slices.Contains(order, s.Tool) {
			order = append(order, s.Tool)
		}
		absRPS[s.Tool] = append(absRPS[s.Tool], s.RPS)
		absP99[s.Tool] = append(absP99[s.Tool], s.P99)
		prev, next := neighbour(samples, i, -1), neighbour(samples, i, +1)
		if prev < 0 || next < 0 {
			if s.Tool == Baseline {
				continue
			}
			// A tool round at an edge (a run cut short) has one neighbour.
			prev, next = max(prev, next), max(prev, next)
			if prev < 0 {
				continue
			}
		}
		baseRPS := (samples[prev].RPS + samples[next].RPS) / 2
		baseP99 := (samples[prev].P99 + samples[next].P99) / 2
		rps[s.Tool] = append(rps[s.Tool], s.RPS/baseRPS)
		p99[s.Tool] = append(p99[s.Tool], s.P99/baseP99)
	}
	var out []Ratio
	for _, t := range order {
		out = append(out, Ratio{Tool: t, RPSRounds: rps[t], P99Rounds: p99[t],
			RPS: SpreadOf(rps[t]), P99: SpreadOf(p99[t]), RPSCI: TInterval(rps[t]), P99CI: TInterval(p99[t]),
			AbsRPS: SpreadOf(absRPS[t]), AbsP99: SpreadOf(absP99[t])})
	}
	return out
}

// neighbour returns the index of the nearest baseline round before (dir -1)
// or after (dir +1) round i, -1 if there is none.
func neighbour(samples []Sample, i, dir int) int {
	for j := i + dir; j >= 0 && j < len(samples); j += dir {
		if samples[j].Tool == Baseline {
			return j
		}
	}
	return -1
}
