// SPDX-License-Identifier: Apache-2.0

package rounds

import (
	"slices"
	"testing"
)

func TestScheduleInterleavesAndRotates(t *testing.T) {
	got := Schedule([]string{"a", "b"}, 2)
	want := []string{"none", "a", "none", "b", "none", "b", "none", "a", "none"}
	if !slices.Equal(got, want) {
		t.Fatalf("Schedule = %v, want %v", got, want)
	}
}

func TestRatiosUseAdjacentBaselines(t *testing.T) {
	samples := []Sample{
		{Tool: "none", RPS: 100, P99: 10},
		{Tool: "a", RPS: 99, P99: 11},
		{Tool: "none", RPS: 98, P99: 10},
		{Tool: "a", RPS: 48, P99: 40},
		{Tool: "none", RPS: 94, P99: 10},
	}
	r := Ratios(samples)
	if len(r) != 2 || r[0].Tool != "none" || r[1].Tool != "a" {
		t.Fatalf("Ratios order: %+v", r)
	}
	a := r[1]
	// round 1: 99/((100+98)/2) = 1.0; round 3: 48/((98+94)/2) = 0.5
	if a.RPS.N != 2 || a.RPS.Min != 0.5 || a.RPS.Max != 1 || a.RPS.Median != 0.75 {
		t.Fatalf("RPS ratios %+v", a.RPS)
	}
	if a.P99.Max != 4 || a.P99.Min != 1.1 {
		t.Fatalf("p99 ratios %+v", a.P99)
	}
	// Only the middle baseline has two neighbours: 98/((100+94)/2).
	if n := r[0].RPS; n.N != 1 || n.Median != 98.0/97 {
		t.Fatalf("baseline noise %+v", n)
	}
	if !slices.Equal(a.RPSRounds, []float64{1, 0.5}) || a.RPSCI.N != 2 || a.RPSCI.Mean != 0.75 {
		t.Fatalf("RPS rounds %v, interval %+v: want [1 0.5] in order, mean 0.75", a.RPSRounds, a.RPSCI)
	}
	if r[0].AbsRPS.N != 3 || r[0].AbsRPS.Median != 98 {
		t.Fatalf("baseline absolute %+v", r[0].AbsRPS)
	}
}

func TestSpreadOfEvenCount(t *testing.T) {
	if s := SpreadOf([]float64{4, 1, 3, 2}); s.Median != 2.5 || s.Min != 1 || s.Max != 4 {
		t.Fatalf("SpreadOf = %+v", s)
	}
}
