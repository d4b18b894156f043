// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/bench/internal/httpload"
	"github.com/stacktop/stacktop/bench/internal/rounds"
)

func parse(t *testing.T, args ...string) (config, error) {
	return parseConfig(append([]string{"-stacktop", "/bin/true", "-out", t.TempDir()}, args...))
}

func TestDefaultRunFitsItsBudget(t *testing.T) {
	cfg, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	// The estimate is the maximum: the budget, which the adaptive rounds
	// stop at; the minimum rounds must leave some of it to them.
	if est := cfg.estimate(); est > 50*time.Minute {
		t.Fatalf("the default full run is estimated at %v; it must fit in 50 minutes", est)
	}
	if least, est := cfg.leastTime(), cfg.estimate(); least >= est-5*time.Minute {
		t.Fatalf("the minimum rounds take %v of the %v: too little left to add rounds", least, est)
	}
	cfg, err = parse(t, "-rounds", "2", "-max-rounds", "2")
	if err != nil {
		t.Fatal(err)
	}
	if est, least := cfg.estimate(), cfg.leastTime(); est != least || est >= cfg.Budget {
		t.Fatalf("with fixed rounds the estimate %v must be their time %v, under the budget", est, least)
	}
}

func TestConfigRejectsBadValues(t *testing.T) {
	for _, args := range [][]string{
		{"-suites", "overhead,bogus"},
		{"-tools", "latency,perf"},
		{"-conns", "100,0"},
		{"-scale", "ten"},
		{"-rounds", "0"},
		{"-max-rounds", "2"}, // below the default -rounds 3
		{"-precision", "0"},
		{"-precision", "NaN"},
		{"-budget", "5m"}, // the minimum rounds need more
		{"-duration", "500ms"},
		{"-port", "80"},
		{"-churn", "-1"},
		{"-namespaces", "-1"},
		{"-namespaces", "1001"},
		{"-rounds", "three"},
	} {
		_, err := parse(t, args...)
		var usage usageError
		if !errors.As(err, &usage) {
			t.Errorf("%v: %v, want a usage error (exit 2)", args, err)
			continue
		}
		values := strings.Split(args[1], ",")
		if !strings.Contains(err.Error(), args[0]) || !strings.Contains(err.Error(), values[len(values)-1]) {
			t.Errorf("%v: %q does not name the flag and the value", args, err)
		}
	}
	if _, err := parseConfig([]string{"-tools", "latency", "-out", t.TempDir()}); err == nil {
		t.Error("stacktop tools accepted without -stacktop")
	}
}

func TestStreamWatchCountsOurRecordsAndLosses(t *testing.T) {
	w := &streamWatch{}
	out := `{"ts":"t","event":"new","proto":"tcp","local_addr":"127.83.0.1","local_port":18152}
{"ts":"t","event":"update","proto":"tcp","local_addr":"10.0.0.1","local_port":22}
{"ts":"t","event":"closed","proto":"tcp","local_addr":"127.0.0.1","remote_addr":"127.83.0.2"}
{"ts":"t","event":"summary","connections":3,"lost":4,"map_full":1}
{"ts":"t","event":"summary","connections":3,"lost":2,"map_f`
	// Written in pieces that split lines, as a pipe delivers them.
	for i := 0; i < len(out); i += 7 {
		if _, err := w.Write([]byte(out[i:min(i+7, len(out))])); err != nil {
			t.Fatal(err)
		}
	}
	s := w.snapshot()
	if s.ours != 2 || s.new != 1 || s.closed != 1 {
		t.Errorf("ours/new/closed = %d/%d/%d, want 2/1/1", s.ours, s.new, s.closed)
	}
	if s.loss.Lost != 4 || s.loss.MapFull != 1 || s.loss.Reports != 1 {
		t.Errorf("loss = %+v, want lost 4, map_full 1 from one complete report", s.loss)
	}
	w.reset()
	if s := w.snapshot(); s.ours != 0 || s.loss.Lost != 4 {
		t.Errorf("after reset: %+v, want record counts zeroed and loss kept", s)
	}
}

// roundsOf is a schedule's rounds, in which each value is a round's requests/s and
// every p99 is 1 ms.
func roundsOf(tools []string, rps []float64) []overheadRound {
	var out []overheadRound
	for i, name := range tools {
		out = append(out, overheadRound{Tool: name, Wrk: httpload.Result{RPS: rps[i], P99: time.Millisecond}})
	}
	return out
}

func TestOverheadVerdicts(t *testing.T) {
	schedule := []string{"none", "stream", "none", "stream", "none", "stream", "none"}
	// Baseline 100, 104, 96, 100: inner ratios 104/98 = 1.061 and 96/102 =
	// 0.941, the noise band [0.941, 1.061]. Stream 70/102, 80/100, 88/98 =
	// 0.686, 0.800, 0.898: mean 0.795 ± 0.263 straddles 0.97, but every
	// round is below 0.97 · 0.941 = 0.913: missed. p99 equal everywhere:
	// ratios 1 ± 0, met.
	o := overheadResult{Workload: workloadKeepAlive, Rounds: roundsOf(schedule, []float64{100, 70, 104, 80, 96, 88, 100})}
	o.summarise()
	if v := o.verdict("stream", "req/s"); v != rounds.Missed {
		t.Errorf("req/s: %s, want missed: %+v", v, o.Judged)
	}
	if v := o.verdict("stream", "p99"); v != rounds.Met {
		t.Errorf("p99: %s, want met: %+v", v, o.Judged)
	}
	if needy := o.needMore([]string{"stream"}, 3, 0.015); len(needy) != 0 {
		t.Errorf("both targets decided, yet %v need more rounds", needy)
	}
	// Stream 96/102, 100/100, 94/98 = 0.941, 1.000, 0.959: one round
	// within the band, the interval straddles: inconclusive, more rounds.
	o = overheadResult{Workload: workloadKeepAlive, Rounds: roundsOf(schedule, []float64{100, 96, 104, 100, 96, 94, 100})}
	o.summarise()
	if v := o.verdict("stream", "req/s"); v != rounds.Inconclusive {
		t.Errorf("req/s: %s, want inconclusive: %+v", v, o.Judged)
	}
	if needy := o.needMore([]string{"stream"}, 3, 0.015); !slices.Equal(needy, []string{"stream"}) {
		t.Errorf("needMore = %v, want stream", needy)
	}
}

func TestNeedMorePutsTargetsFirst(t *testing.T) {
	// bpftrace has no target, so it comes after the tools that have one
	// whatever the rotation; every ratio here is a single round.
	o := overheadResult{Workload: workloadKeepAlive, Rounds: roundsOf([]string{"none", "bpftrace", "none", "stream", "none"}, []float64{100, 90, 100, 90, 100})}
	o.summarise()
	for rep := range 2 {
		if got := o.needMore([]string{"bpftrace", "stream"}, rep, 0.015); !slices.Equal(got, []string{"stream", "bpftrace"}) {
			t.Errorf("rep %d: needMore = %v, want [stream bpftrace]", rep, got)
		}
	}
}
