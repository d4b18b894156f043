package main

import (
	"testing"
	"time"

	"github.com/stacktop/stacktop/bench/internal/rounds"
)

func TestDefaultRunFitsItsBudget(t *testing.T) {
	cfg, err := parseConfig([]string{"-stacktop", "/bin/true", "-out", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if est := cfg.estimate(); est > 21*time.Minute {
		t.Fatalf("the default full run is estimated at %v; it must fit in about 20 minutes", est)
	}
}

func TestConfigRejectsBadValues(t *testing.T) {
	for _, args := range [][]string{
		{"-suites", "overhead,bogus"},
		{"-tools", "latency,perf"},
		{"-conns", "100,0"},
		{"-scale", "ten"},
		{"-rounds", "0"},
		{"-duration", "500ms"},
		{"-port", "80"},
		{"-churn", "-1"},
	} {
		if _, err := parseConfig(append([]string{"-stacktop", "/bin/true", "-out", t.TempDir()}, args...)); err == nil {
			t.Errorf("%v accepted", args)
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

func TestTargetsAreInconclusiveWithinTheNoiseFloor(t *testing.T) {
	res := &results{Overhead: []overheadResult{{Path: "loopback", Conns: 100, Ratios: []rounds.Ratio{
		{Tool: "none", RPSNoise: 0.005, P99Noise: 0.3},
		{Tool: "latency", RPS: rounds.Spread{Median: 0.97, N: 3}, P99: rounds.Spread{Median: 1.01, N: 3}},
	}}}}
	rows := targets(res)
	if len(rows) != 2 {
		t.Fatalf("got %d target rows, want 2: %+v", len(rows), rows)
	}
	if v := rows[0].verdict(); v != "**missed**" {
		t.Errorf("req/s at 97%% with a ±0.5%% noise floor: %q, want missed", v)
	}
	if v := rows[1].verdict(); v != "inconclusive: baseline rounds typically differ by 30.0%" {
		t.Errorf("p99 with a ±30%% noise floor: %q, want inconclusive", v)
	}
}
