// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/bpffd"
)

var (
	statsEnabledDesc = prometheus.NewDesc("stacktop_bpf_stats_enabled",
		"1 while the kernel collects BPF run statistics (sysctl kernel.bpf_stats_enabled or --bpf.stats), else 0.",
		nil, nil)
	programRunsDesc = prometheus.NewDesc("stacktop_bpf_program_runs_total",
		"Times each BPF program ran (only while BPF statistics are enabled).", []string{"program"}, nil)
	programRunTimeDesc = prometheus.NewDesc("stacktop_bpf_program_run_seconds_total",
		"Time spent running each BPF program (only while BPF statistics are enabled).", []string{"program"}, nil)
	programMissesDesc = prometheus.NewDesc("stacktop_bpf_program_recursion_misses_total",
		"Times each BPF program was skipped because another BPF program was running on the CPU.",
		[]string{"program"}, nil)
)

func describePrograms(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{statsEnabledDesc, programRunsDesc, programRunTimeDesc, programMissesDesc} {
		ch <- d
	}
}

// sysctlBPFStatsEnabled reports kernel.bpf_stats_enabled. It does not see
// statistics enabled through a BPF_ENABLE_STATS fd, which the sysctl does not
// reflect.
func sysctlBPFStatsEnabled() bool {
	b, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	return err == nil && string(bytes.TrimSpace(b)) == "1"
}

// collectPrograms reports the statistics of every BPF program this process
// holds, by name: whichever package loaded them, they are stacktop's cost.
// While statistics are disabled the kernel leaves run count and time at
// zero, which would read as "never ran", so those are reported only while
// enabled; recursion misses are always counted.
func (e *Exporter) collectPrograms(ch chan<- prometheus.Metric) error {
	enabled := e.cfg.BPFStatsEnabled()
	ch <- prometheus.MustNewConstMetric(statsEnabledDesc, prometheus.GaugeValue, b2f(enabled))
	held, err := heldPrograms()
	if err != nil {
		return err
	}
	byName := map[string]*ebpf.ProgramStats{} // summed: a name may be loaded more than once
	var errs []error
	for id, fd := range held {
		name, st, err := e.programStats(id, fd)
		if err != nil {
			errs = append(errs, fmt.Errorf("BPF program %d: %w", id, err))
			continue
		}
		sum := byName[name]
		if sum == nil {
			sum = &ebpf.ProgramStats{}
			byName[name] = sum
		}
		sum.RunCount += st.RunCount
		sum.Runtime += st.Runtime
		sum.RecursionMisses += st.RecursionMisses
	}
	for name, st := range byName {
		ch <- prometheus.MustNewConstMetric(programMissesDesc, prometheus.CounterValue, float64(st.RecursionMisses), name)
		if enabled {
			ch <- prometheus.MustNewConstMetric(programRunsDesc, prometheus.CounterValue, float64(st.RunCount), name)
			ch <- prometheus.MustNewConstMetric(programRunTimeDesc, prometheus.CounterValue, st.Runtime.Seconds(), name)
		}
	}
	return errors.Join(errs...)
}

// kernelNameLen is how much of a program's name the kernel keeps
// (BPF_OBJ_NAME_LEN without the NUL).
const kernelNameLen = 15

// programStats reads one held program's statistics through a duplicate of
// its descriptor (the original belongs to whoever loaded it). A program is
// named as the kernel names it: cilium/ebpf recovers longer names from BTF
// only with CAP_SYS_ADMIN, and a fleet of root and capability-only
// exporters must label the same program the same way.
func (e *Exporter) programStats(id uint32, fd int) (string, *ebpf.ProgramStats, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return "", nil, err
	}
	p, err := ebpf.NewProgramFromFD(dup)
	if err != nil {
		return "", nil, err
	}
	defer p.Close()
	name, ok := e.programNames[id]
	if !ok {
		info, err := p.Info()
		if err != nil {
			return "", nil, err
		}
		name = info.Name[:min(len(info.Name), kernelNameLen)]
		e.programNames[id] = name
	}
	st, err := p.Stats()
	return name, st, err
}

// heldPrograms returns the file descriptors this process holds on BPF
// programs, one per program ID.
func heldPrograms() (map[uint32]int, error) {
	objs, err := bpffd.Held(os.Getpid())
	if err != nil {
		return nil, err
	}
	held := map[uint32]int{}
	for _, o := range objs {
		if o.Kind == bpffd.Prog && o.ProgID != 0 {
			held[o.ProgID] = o.FD
		}
	}
	return held, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
