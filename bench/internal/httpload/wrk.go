// SPDX-License-Identifier: Apache-2.0

package httpload

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

//go:embed report.lua
var reportLua []byte

// Result is one wrk run.
type Result struct {
	Requests uint64        `json:"requests"`
	Errors   uint64        `json:"errors"`
	Duration time.Duration `json:"duration_ns"`
	RPS      float64       `json:"rps"`
	P50      time.Duration `json:"p50_ns"`
	P99      time.Duration `json:"p99_ns"`
}

// Wrk describes how to run the load generator.
type Wrk struct {
	Dir     string   // where its Lua report script is written
	Threads int      // wrk -t
	CPU     int      // pin wrk to this CPU; negative: no pinning
	Prefix  []string // command prefix, e.g. ip netns exec <peer>
	// Close asks for one connection per request (Connection: close): wrk
	// opens a new connection after each response.
	Close bool
}

// Run drives url with conns concurrent connections for d and returns the
// totals wrk's report script prints.
func (w Wrk) Run(url string, conns int, d time.Duration) (Result, error) {
	script := filepath.Join(w.Dir, "report.lua")
	if err := os.WriteFile(script, reportLua, 0o644); err != nil {
		return Result{}, err
	}
	args := append([]string{}, w.Prefix...)
	if w.CPU >= 0 {
		args = append(args, "taskset", "-c", strconv.Itoa(w.CPU))
	}
	threads := min(w.Threads, conns)
	args = append(args, "wrk", "--latency", "-s", script)
	if w.Close {
		args = append(args, "-H", "Connection: close")
	}
	args = append(args,
		"-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns),
		"-d", fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds())),
		"--timeout", "5s", url)
	var out, errb bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return parseReport(out.Bytes())
}

// parseReport finds the line report.lua prints at the end of the run.
func parseReport(out []byte) (Result, error) {
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		line, ok := strings.CutPrefix(s.Text(), "STBENCH ")
		if !ok {
			continue
		}
		var r struct {
			Requests, Errors uint64
			DurationUs       float64 `json:"duration_us"`
			P50Us            float64 `json:"p50_us"`
			P99Us            float64 `json:"p99_us"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return Result{}, fmt.Errorf("wrk report %q: %w", line, err)
		}
		if r.DurationUs <= 0 {
			return Result{}, fmt.Errorf("wrk report %q: no duration", line)
		}
		us := func(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }
		return Result{
			Requests: r.Requests, Errors: r.Errors, Duration: us(r.DurationUs),
			RPS: float64(r.Requests) / (r.DurationUs / 1e6), P50: us(r.P50Us), P99: us(r.P99Us),
		}, nil
	}
	return Result{}, fmt.Errorf("no STBENCH line in wrk output:\n%s", out)
}
