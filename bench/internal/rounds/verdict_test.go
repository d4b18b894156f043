// SPDX-License-Identifier: Apache-2.0

package rounds

import (
	"math"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestTQuantileMatchesTables(t *testing.T) {
	for _, c := range []struct {
		df   int
		want float64
	}{
		{1, math.Tan(0.475 * math.Pi)},                  // closed form for df 1: 12.706
		{2, 0.95 * math.Sqrt(2/(1-0.95*0.95))},          // closed form for df 2: 4.303
		{3, 3.182}, {4, 2.776}, {9, 2.262}, {29, 2.045}, // printed tables
		{1000, 1.962},
	} {
		if got := tQuantile(0.95, c.df); !near(got, c.want, 5e-4) {
			t.Errorf("t(0.95, df %d) = %.4f, want %.4f", c.df, got, c.want)
		}
	}
}

func TestTInterval(t *testing.T) {
	// mean 0.92, s = 0.02, half-width 4.3027 · 0.02 / √3 = 0.04968
	iv := TInterval([]float64{0.90, 0.92, 0.94})
	if iv.N != 3 || !near(iv.Mean, 0.92, 1e-12) || !near(iv.HalfWidth, 0.04968, 1e-5) {
		t.Fatalf("TInterval = %+v, want mean 0.92 ± 0.04968 over 3", iv)
	}
	if !near(iv.Lo(), 0.87032, 1e-5) || !near(iv.Hi(), 0.96968, 1e-5) {
		t.Fatalf("ends %.5f–%.5f", iv.Lo(), iv.Hi())
	}
	if one := TInterval([]float64{0.9}); one.Defined() || one.Mean != 0.9 {
		t.Fatalf("one round: %+v, want mean 0.9 and no interval", one)
	}
	if same := TInterval([]float64{1, 1, 1}); !same.Defined() || same.HalfWidth != 0 {
		t.Fatalf("identical rounds: %+v, want a zero-width interval", same)
	}
}

func TestJudge(t *testing.T) {
	rps := Target{Limit: 0.97}
	p99 := Target{Limit: 1.10, AtMost: true}
	wide := Band{Lo: 0.95, Hi: 1.05, N: 3} // baseline rounds within ±5% of their neighbours
	for _, c := range []struct {
		name   string
		target Target
		ratios []float64
		band   Band
		want   Verdict
	}{
		// 0.99 ± 4.3027·0.005/√3 = [0.9776, 1.0024], all at or above 0.97
		{"interval above", rps, []float64{0.985, 0.99, 0.995}, wide, Met},
		// [0.87032, 0.96968]: just below 0.97
		{"interval below", rps, []float64{0.90, 0.92, 0.94}, wide, Missed},
		// mean 0.97 ± 0.0497
		{"interval straddles", rps, []float64{0.95, 0.97, 0.99}, wide, Inconclusive},
		// [0.552, 1.048] straddles, but every round is below 0.97 · 0.95 = 0.9215:
		// a tool clearly below its target: a miss, not "inconclusive"
		{"every round below the band", rps, []float64{0.70, 0.80, 0.90}, wide, Missed},
		{"one round within the band", rps, []float64{0.70, 0.80, 0.93}, wide, Inconclusive},
		// a tool right at 0.95 with a tight band: rounds below the band
		// around 1 but not below 0.95 · 0.99 = 0.9405 all
		{"band is taken around the target", Target{Limit: 0.95}, []float64{0.94, 0.945, 0.95},
			Band{Lo: 0.99, Hi: 1.01, N: 3}, Inconclusive},
		{"band from one baseline ratio", rps, []float64{0.70, 0.80, 0.90}, Band{Lo: 0.95, Hi: 1, N: 1}, Inconclusive},
		{"one round", rps, []float64{0.5}, wide, Inconclusive},
		// p99 ≤ 1.10: 1.02 ± 0.0497 ends at 1.0697
		{"p99 interval within", p99, []float64{1.00, 1.02, 1.04}, wide, Met},
		// [0.881, 2.019] straddles; every round above 1.10 · 1.05 = 1.155
		{"p99 every round above the band", p99, []float64{1.25, 1.40, 1.70}, wide, Missed},
		{"p99 one round within the band", p99, []float64{1.15, 1.40, 1.70}, wide, Inconclusive},
	} {
		v, why := Judge(c.target, c.ratios, TInterval(c.ratios), c.band)
		if v != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, v, why, c.want)
		}
	}
}

func TestBandIncludesOne(t *testing.T) {
	if b := BandOf([]float64{1.02, 1.03}); b.Lo != 1 || b.Hi != 1.03 || b.N != 2 {
		t.Fatalf("BandOf = %+v, want [1, 1.03] from 2", b)
	}
	if b := BandOf([]float64{0.96, 1.04, 0.99}); b.Lo != 0.96 || b.Hi != 1.04 {
		t.Fatalf("BandOf = %+v, want [0.96, 1.04]", b)
	}
}

func TestNeedsMore(t *testing.T) {
	const precision = 0.015
	wide, narrow := Interval{Mean: 0.9, HalfWidth: 0.02, N: 3}, Interval{Mean: 0.9, HalfWidth: 0.01, N: 3}
	for _, c := range []struct {
		name      string
		iv        Interval
		v         Verdict
		hasTarget bool
		want      bool
	}{
		{"one round", Interval{Mean: 0.9, N: 1}, Missed, true, true},
		{"wide and undecided", wide, Inconclusive, true, true},
		{"wide but decided", wide, Missed, true, false},
		{"narrow and undecided", narrow, Inconclusive, true, false},
		{"wide, no target", wide, Inconclusive, false, true},
		{"narrow, no target", narrow, Inconclusive, false, false},
	} {
		if got := NeedsMore(c.iv, c.v, c.hasTarget, precision); got != c.want {
			t.Errorf("%s: NeedsMore = %v, want %v", c.name, got, c.want)
		}
	}
}
