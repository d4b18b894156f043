// SPDX-License-Identifier: Apache-2.0

package rounds

import (
	"fmt"
	"math"
)

// Level is the confidence level of every interval the benchmark reports.
const Level = 0.95

// Interval is a Student t confidence interval for the mean of a set of
// per-round ratios. It is defined only for two or more rounds.
type Interval struct {
	Mean      float64 `json:"mean"`
	HalfWidth float64 `json:"half_width"`
	N         int     `json:"n"`
}

// Defined reports whether there were enough rounds for an interval.
func (i Interval) Defined() bool { return i.N >= 2 }

// Lo and Hi are the interval's ends.
func (i Interval) Lo() float64 { return i.Mean - i.HalfWidth }
func (i Interval) Hi() float64 { return i.Mean + i.HalfWidth }

// TInterval is the two-sided Level confidence interval for the mean of vs:
// mean ± t(Level, n−1) · s / √n, s the sample standard deviation.
func TInterval(vs []float64) Interval {
	n := len(vs)
	iv := Interval{N: n}
	if n == 0 {
		return iv
	}
	for _, v := range vs {
		iv.Mean += v
	}
	iv.Mean /= float64(n)
	if n < 2 {
		return iv
	}
	var ss float64
	for _, v := range vs {
		ss += (v - iv.Mean) * (v - iv.Mean)
	}
	s := math.Sqrt(ss / float64(n-1))
	iv.HalfWidth = tQuantile(Level, n-1) * s / math.Sqrt(float64(n))
	return iv
}

// tQuantile returns the t for which P(|T| ≤ t) = level under Student's t
// distribution with df degrees of freedom, by bisection on probWithin.
func tQuantile(level float64, df int) float64 {
	lo, hi := 0.0, 1.0
	for probWithin(hi, df) < level {
		lo, hi = hi, 2*hi
	}
	for range 100 {
		mid := (lo + hi) / 2
		if probWithin(mid, df) < level {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// probWithin is P(|T| ≤ t) for Student's t with df degrees of freedom, from
// the finite series for integer df (Abramowitz & Stegun 26.7.3 and 26.7.4),
// with θ = atan(t/√df):
//
//	odd df:  (2/π)·(θ + sin θ cos θ · (1 + 2/3 cos²θ + 2·4/(3·5) cos⁴θ + … to cos^(df−3)θ)), df > 1; 2θ/π for df = 1
//	even df: sin θ · (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + … to cos^(df−2)θ)
func probWithin(t float64, df int) float64 {
	theta := math.Atan(t / math.Sqrt(float64(df)))
	sin, cos := math.Sincos(theta)
	c2 := cos * cos
	first := 2 // even: multipliers 1/2, 3/4, …
	if df%2 == 1 {
		first = 3 // odd: 2/3, 4/5, …
	}
	sum, term := 1.0, 1.0
	for k := first; k <= df-2; k += 2 {
		term *= float64(k-1) / float64(k) * c2
		sum += term
	}
	switch {
	case df == 1:
		return 2 * theta / math.Pi
	case df%2 == 1:
		return 2 / math.Pi * (theta + sin*cos*sum)
	}
	return sin * sum
}

// Target is a budget's bound on a ratio: at least Limit (requests/s) or,
// with AtMost, at most Limit (p99).
type Target struct {
	Limit  float64 `json:"limit"`
	AtMost bool    `json:"at_most"`
}

func (t Target) String() string {
	if t.AtMost {
		return fmt.Sprintf("≤ %.2f", t.Limit)
	}
	return fmt.Sprintf("≥ %.2f", t.Limit)
}

// Verdict is what the rounds say about a target.
type Verdict string

const (
	Met          Verdict = "met"
	Missed       Verdict = "missed"
	Inconclusive Verdict = "inconclusive"
)

// Band is the baseline's noise band: the range of the baseline rounds'
// ratios to their neighbours, widened to include 1 (a baseline compared
// with itself).
type Band struct {
	Lo, Hi float64
	N      int // baseline ratios it was taken from
}

// BandOf returns the noise band of the baseline ratios vs.
func BandOf(vs []float64) Band {
	s := SpreadOf(vs)
	return Band{Lo: min(s.Min, 1), Hi: max(s.Max, 1), N: s.N}
}

// Judge decides a target from a tool's per-round ratios, their interval
// and the baseline's noise band: met when the interval lies entirely on the
// target's side of the limit, missed when entirely beyond it. Otherwise it
// is missed too when every round lies beyond the limit by more than the
// baseline's whole noise band (below Limit·band.Lo for an at-least target,
// above Limit·band.Hi for an at-most one): a tool exactly at the limit
// would scatter around it within that band, so rounds that all fall outside
// it are a miss the interval is merely too wide to show. Anything else is
// inconclusive. The band rule needs at least two rounds and two baseline
// ratios.
func Judge(t Target, ratios []float64, iv Interval, band Band) (Verdict, string) {
	if iv.Defined() {
		met, missed := iv.Lo() >= t.Limit, iv.Hi() < t.Limit
		if t.AtMost {
			met, missed = iv.Hi() <= t.Limit, iv.Lo() > t.Limit
		}
		switch {
		case met:
			return Met, "interval within the target"
		case missed:
			return Missed, "interval beyond the target"
		}
	}
	if len(ratios) >= 2 && band.N >= 2 {
		beyond := 0
		for _, r := range ratios {
			if (!t.AtMost && r < t.Limit*band.Lo) || (t.AtMost && r > t.Limit*band.Hi) {
				beyond++
			}
		}
		if beyond == len(ratios) {
			return Missed, "every round beyond the baseline's noise band"
		}
	}
	if !iv.Defined() {
		return Inconclusive, "fewer than two rounds"
	}
	return Inconclusive, "interval straddles the target"
}

// NeedsMore reports whether another round could still change what is
// reported about one ratio: its interval is wider than ±precision and, if
// it has a target, the target is still undecided. A decided target stops
// asking for rounds even when its interval is wide, so the time budget goes
// to the verdicts still open.
func NeedsMore(iv Interval, v Verdict, hasTarget bool, precision float64) bool {
	if !iv.Defined() {
		return true
	}
	if hasTarget && v != Inconclusive {
		return false
	}
	return iv.HalfWidth > precision
}
