// SPDX-License-Identifier: Apache-2.0

package protocol

import (
	"regexp"
	"strconv"
	"strings"
)

// Stall is what the kernel said about CPUs or tasks that stopped making
// progress: soft and hard lockups, RCU stalls (with the NMI backtraces of
// the CPUs they name) and tasks blocked for minutes. From its first report
// on, every kernel line belongs to it; a guest in that state prints little
// else, and what it does print (the next report, a task's trace) is
// evidence too.
type Stall struct {
	First   string       // the first report's header line
	Reports int          // report headers seen
	CPUs    []*CPUReport // every register dump, in console order
	// Lines are the stall's kernel lines (at most maxStallLines), for the
	// failure report.
	Lines []string
	size  int // kernel lines seen
}

// Size is the number of kernel lines the stall's reports have had so far:
// while it grows, a report is still being printed. A nil Stall has none.
func (s *Stall) Size() int {
	if s == nil {
		return 0
	}
	return s.size
}

// CPUReport is one register dump in a stall report: where one CPU was.
type CPUReport struct {
	CPU  int    // from "CPU: N" or "NMI backtrace for cpu N"
	Time string // the kernel's timestamp of the dump ("662.041078")
	// RIP is the kernel function, offset and size the CPU was at
	// ("sk_filter_trim_cap+0x36/0x250"), Code the code bytes the kernel
	// printed around it, the one at RIP in angle brackets.
	RIP, Code string
	// TrapRIP and TrapCode are the frame the CPU's exception or interrupt
	// interrupted, when the dump has one (the next kernel RIP in its call
	// trace); after an int3, the address following the int3.
	TrapRIP, TrapCode string
	// Int3 says the CPU was handling a breakpoint: its RIP is in the int3
	// exception's code, or its call trace names the int3 entry (the
	// common exception entry, error_entry, is no int3 of itself).
	Int3 bool
	// Ours is the first line of the dump that puts one of our BPF programs
	// (or the trampoline calling one) on the CPU's path, or "".
	Ours string
}

const (
	maxStallLines = 400
	maxStallCPUs  = 64
)

var (
	// stallHeader matches the first line of each kind of report.
	stallHeader = regexp.MustCompile(`soft lockup - CPU#\d+ stuck for|hard LOCKUP on cpu \d+|rcu: INFO: \S+ (?:self-)?detected stall|` +
		`rcu: INFO: \S+ detected stalls on CPUs/tasks|INFO: task \S+ blocked for more than|NMI backtrace for cpu \d+`)
	kernelLine = regexp.MustCompile(`^\[\s*(\d+\.\d+)\]`)
	// A dump starts with "NMI backtrace for cpu N" or "CPU: N PID: ..."
	// ("CPU: N UID: U PID: ..." since 6.10).
	nmiBacktrace = regexp.MustCompile(`NMI backtrace for cpu (\d+)`)
	cpuLine      = regexp.MustCompile(`\] CPU: (\d+) (?:UID: \d+ )?PID: `)
	kernelRIP    = regexp.MustCompile(`RIP: 0010:(\S+)`)
	userRIP      = regexp.MustCompile(`RIP: 0033:`)
	codeLine     = regexp.MustCompile(`\] Code: (.*)$`)
	int3Entry    = regexp.MustCompile(`^(?:asm_exc_int3|exc_int3|do_int3|poke_int3_handler|kprobe_int3_handler)\+`)
	int3Frame    = regexp.MustCompile(`\]\s+(?:\? )?asm_exc_int3\+`)
	// OurFrame matches a line that puts one of our BPF programs (or the
	// trampoline that calls it, or the read of a BPF iterator, which only
	// our tools open in a guest) on a CPU's path: the RIP, or a call-trace
	// frame the unwinder is sure of (it marks guesses with "? "). A kernel
	// bug that only our use of BPF reaches is ours to know about: 7.2's
	// socket storage iterator oopsed under churn, with bpf_seq_read, not
	// our program, on the trace.
	OurFrame = regexp.MustCompile(`(?:RIP: [0-9a-f]{4}:|\]\s+|^\s+)bpf_(?:prog_|trampoline_|seq_read)`)
)

// IsStall reports whether a console line opens a stall report.
func IsStall(line string) bool { return stallHeader.MatchString(line) }

// stallParser follows the register dumps of a stall's reports.
type stallParser struct {
	cur *CPUReport
	// code is where the next Code: line goes: the dump's RIP, its trap
	// frame, or nowhere (after a user-space RIP).
	code *string
	// nmiCPU is the CPU an "NMI backtrace for cpu N" line announced, whose
	// "CPU: N PID:" line continues the same dump.
	nmiCPU int
}

func (s *Stall) line(p *stallParser, line string) {
	stamp := kernelLine.FindStringSubmatch(line)
	if stamp == nil {
		return
	}
	s.size++
	if len(s.Lines) < maxStallLines {
		s.Lines = append(s.Lines, line)
	}
	if stallHeader.MatchString(line) && !nmiBacktrace.MatchString(line) {
		s.Reports++
	}
	if m := nmiBacktrace.FindStringSubmatch(line); m != nil {
		cpu, _ := strconv.Atoi(m[1])
		s.startCPU(p, cpu, stamp[1])
		p.nmiCPU = cpu
		return
	}
	if m := cpuLine.FindStringSubmatch(line); m != nil {
		cpu, _ := strconv.Atoi(m[1])
		if p.cur == nil || p.nmiCPU != cpu || p.cur.RIP != "" {
			s.startCPU(p, cpu, stamp[1])
		}
		p.nmiCPU = -1
		return
	}
	if p.cur == nil {
		return
	}
	if p.cur.Ours == "" && OurFrame.MatchString(line) {
		p.cur.Ours = strings.TrimSpace(line)
	}
	if int3Frame.MatchString(line) {
		p.cur.Int3 = true
	}
	switch m := kernelRIP.FindStringSubmatch(line); {
	case m != nil && p.cur.RIP == "":
		p.cur.RIP, p.code = m[1], &p.cur.Code
		p.cur.Int3 = p.cur.Int3 || int3Entry.MatchString(m[1])
	case m != nil && p.cur.TrapRIP == "":
		p.cur.TrapRIP, p.code = m[1], &p.cur.TrapCode
	case m != nil || userRIP.MatchString(line):
		p.code = nil
	}
	if m := codeLine.FindStringSubmatch(line); m != nil && p.code != nil {
		*p.code, p.code = m[1], nil
	}
}

func (s *Stall) startCPU(p *stallParser, cpu int, time string) {
	p.cur, p.code, p.nmiCPU = nil, nil, -1
	if len(s.CPUs) < maxStallCPUs {
		p.cur = &CPUReport{CPU: cpu, Time: time}
		s.CPUs = append(s.CPUs, p.cur)
	}
}

// CodeAt returns the instruction bytes of a Code: line from the one in
// angle brackets on, and the byte before it (-1 if none).
func CodeAt(code string) (at []byte, before int) {
	before = -1
	fields := strings.Fields(code)
	for i, f := range fields {
		if !strings.HasPrefix(f, "<") {
			continue
		}
		if i > 0 {
			if b, err := strconv.ParseUint(fields[i-1], 16, 8); err == nil {
				before = int(b)
			}
		}
		for _, f := range fields[i:] {
			b, err := strconv.ParseUint(strings.Trim(f, "<>"), 16, 8)
			if err != nil {
				break
			}
			at = append(at, byte(b))
		}
		return at, before
	}
	return nil, before
}
