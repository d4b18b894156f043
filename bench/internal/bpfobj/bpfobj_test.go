package bpfobj

import (
	"strings"
	"testing"
	"time"
)

func TestParseFdinfo(t *testing.T) {
	prog, mp := parseFdinfo(strings.NewReader("pos:\t0\nflags:\t02000002\nlink_type:\ttracing\nlink_id:\t7\nprog_tag:\tab\nprog_id:\t42\n"))
	if prog != 42 || mp != 0 {
		t.Fatalf("link fdinfo: prog %d map %d, want 42 0", prog, mp)
	}
	prog, mp = parseFdinfo(strings.NewReader("map_type:\t1\nkey_size:\t4\nmemlock:\t4096\nmap_id:\t9\n"))
	if prog != 0 || mp != 9 {
		t.Fatalf("map fdinfo: prog %d map %d, want 0 9", prog, mp)
	}
}

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
