// SPDX-License-Identifier: Apache-2.0

package bpfobj

import (
	"testing"
	"time"
)

func TestCostsPerRunOverWindow(t *testing.T) {
	before := []ProgStat{{ID: 1, Runs: 100, Runtime: 1000}, {ID: 2, Runs: 5, Runtime: 50}}
	after := []ProgStat{{ID: 1, Runs: 300, Runtime: 31000}, {ID: 2, Runs: 5, Runtime: 50}, {ID: 3, Runs: 9}}
	c := Costs(before, after, 2*time.Second)
	if len(c) != 2 {
		t.Fatalf("got %d costs, want 2 (program 3 has no baseline)", len(c))
	}
	if c[0].Runs != 200 || c[0].NsPerRun != 150 || c[0].RunsPerSec != 100 {
		t.Fatalf("program 1: %+v, want 200 runs, 150 ns/run, 100 runs/s", c[0])
	}
	if c[1].Runs != 0 || c[1].NsPerRun != 0 {
		t.Fatalf("idle program 2: %+v, want zero cost", c[1])
	}
}
