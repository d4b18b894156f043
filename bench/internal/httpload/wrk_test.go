// SPDX-License-Identifier: Apache-2.0

package httpload

import (
	"testing"
	"time"
)

func TestParseReport(t *testing.T) {
	out := []byte("Running 5s test @ http://127.0.0.1:1/\n  1 threads and 100 connections\n" +
		`STBENCH {"requests":50000,"errors":3,"duration_us":5000000,"p50_us":900,"p99_us":2500}` + "\n")
	r, err := parseReport(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.RPS != 10000 || r.P99 != 2500*time.Microsecond || r.P50 != 900*time.Microsecond || r.Errors != 3 {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := parseReport([]byte("Running 5s test\n")); err == nil {
		t.Fatal("output without a report line accepted")
	}
}

func TestCPUMask(t *testing.T) {
	for cpu, want := range map[int]string{0: "1", 1: "10", 3: "1000"} {
		if got := cpuMask(cpu); got != want {
			t.Errorf("cpuMask(%d) = %q, want %q", cpu, got, want)
		}
	}
}
