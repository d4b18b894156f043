// SPDX-License-Identifier: Apache-2.0

// Package proc reads what the benchmark measures about a running process
// from /proc: CPU time consumed and resident memory.
package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime/stime in /proc/<pid>/stat. The kernel fixes
// USER_HZ at 100 on every architecture we run on, and reading it through
// sysconf(_SC_CLK_TCK) would need cgo.
const userHZ = 100

// CPUTime returns the user plus system CPU time consumed so far by all
// threads of process pid.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(b)
}

func parseStat(b []byte) (time.Duration, error) {
	// comm (field 2) may contain spaces and parentheses: fields are counted
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat line %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat line has %d fields after comm, want at least 13", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat field %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// RSS returns the resident set size (VmRSS) of process pid in bytes.
func RSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseStatusKB(b, "VmRSS:")
}

func parseStatusKB(b []byte, key string) (uint64, error) {
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, key)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("malformed %s line %q", key, line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s value %q: %w", key, f[0], err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no %s line in status", key)
}
