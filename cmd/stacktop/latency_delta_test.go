// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/testenv"
)

// intervalRecord reads both the histogram and the --summary JSON records.
type intervalRecord struct {
	Hook    string           `json:"hook"`
	Count   uint64           `json:"count"`
	P50NS   uint64           `json:"p50_ns"`
	P99NS   uint64           `json:"p99_ns"`
	MaxNS   uint64           `json:"max_ns"`
	Buckets []latency.Bucket `json:"buckets"`
}

// TestLatencyDeltaCountsEachInterval: with --delta, each report counts only
// the reads of its own interval: once the socket-read probe is seen
// working and an interval has passed with nothing, n datagrams read from a
// peer namespace add up to exactly n over the following reports, and the
// report after them is empty again (cumulative counts would stay at n). With
// --summary each record has p50 ≤ p99 ≤ max, powers of two as log2 bucket
// bounds are.
func TestLatencyDeltaCountsEachInterval(t *testing.T) {
	p := testenv.NewPeer(t, "stl-delta", 180)
	for _, mode := range []struct {
		name    string
		summary bool
	}{{"histograms", false}, {"summary", true}} {
		t.Run(mode.name, func(t *testing.T) {
			args := []string{"-e", "udp-socket-read", "-i", p.HostIf, "--delta", "--format", "json", "-r", "100ms"}
			if mode.summary {
				args = append(args, "--summary")
			}
			cmd, lines := runningLatency(t, args...)
			parse := func(line string) intervalRecord {
				var r intervalRecord
				if err := json.Unmarshal([]byte(line), &r); err != nil || r.Hook != "udp-socket-read" {
					t.Fatalf("want records of udp-socket-read only, got %q (%v)", line, err)
				}
				return r
			}
			next := func() intervalRecord {
				select {
				case line, ok := <-lines:
					if !ok {
						t.Fatalf("stacktop latency exited early: %v (its stderr is above)", cmd.Wait())
					}
					return parse(line)
				case <-time.After(startTimeout):
					t.Fatalf("no record within %v", startTimeout)
				}
				return intervalRecord{}
			}
			// Probe attached and stamping on: a warm-up datagram is counted.
			deadline := time.Now().Add(startTimeout)
			for len(lines) == 0 || next().Count == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("no warm-up read counted within %v", startTimeout)
				}
				p.UDPToHost(t, testenv.V4, 1, 50*time.Millisecond)
			}
			for next().Count != 0 { // an interval with nothing: the warm-up is behind us
			}
			const n = 25
			p.UDPToHost(t, testenv.V4, n, 0)
			var sum uint64
			var after []intervalRecord
			for sum < n {
				r := next()
				sum += r.Count
				after = append(after, r)
			}
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			var rest []intervalRecord
			for line := range lines {
				rest = append(rest, parse(line))
			}
			if err := cmd.Wait(); err != nil {
				t.Fatal(err)
			}
			for _, r := range rest {
				sum += r.Count
			}
			if sum != n || len(rest) == 0 || rest[len(rest)-1].Count != 0 {
				t.Fatalf("reads over the intervals after the burst: %d, want %d, then an empty report (records %+v, then %+v)", sum, n, after, rest)
			}
			for _, r := range after {
				switch {
				case r.Count == 0:
				case mode.summary && !(0 < r.P50NS && r.P50NS <= r.P99NS && r.P99NS <= r.MaxNS && r.MaxNS&(r.MaxNS-1) == 0):
					t.Errorf("summary %+v: want 0 < p50 ≤ p99 ≤ max, a power of two", r)
				case !mode.summary && (len(r.Buckets) == 0 || r.Buckets[len(r.Buckets)-1].Count != r.Count):
					t.Errorf("histogram %+v: cumulative buckets must end at the interval's count", r)
				}
			}
		})
	}
}
