// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// profile samples process pid's call stacks with perf for d and writes
// perf's flat report to <out>/<name>.perf.txt, so a missed user-space target
// comes with what dominates the cost. It runs after the measurement window,
// never during it, so sampling does not inflate the measured CPU.
func profile(cfg config, pid int, name string, d time.Duration) {
	data := filepath.Join(cfg.Out, name+".perf.data")
	rec := exec.Command("perf", "record", "-q", "-F", "499", "-g", "-o", data,
		"-p", strconv.Itoa(pid), "--", "sleep", strconv.Itoa(int(d.Seconds())))
	if out, err := rec.CombinedOutput(); err != nil {
		slog.Warn("perf record failed", "err", err, "out", string(out))
		return
	}
	txt := filepath.Join(cfg.Out, name+".perf.txt")
	f, err := os.Create(txt)
	if err != nil {
		slog.Warn("perf report", "err", err)
		return
	}
	defer f.Close()
	rep := exec.Command("perf", "report", "-i", data, "--stdio", "--no-children", "--percent-limit", "1", "-g", "none")
	rep.Stdout = f
	if err := rep.Run(); err != nil {
		slog.Warn("perf report failed", "err", err)
		return
	}
	slog.Info("profile", "file", txt)
	fmt.Fprintln(f) // perf's report may end without a newline
}
