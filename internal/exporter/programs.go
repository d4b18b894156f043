package exporter

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	statsEnabledDesc = prometheus.NewDesc("stacktop_bpf_stats_enabled",
		"1 while the kernel collects BPF run statistics (sysctl kernel.bpf_stats_enabled or --bpf-stats), else 0.",
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

// SysctlBPFStatsEnabled reports kernel.bpf_stats_enabled. It does not see
// statistics enabled through a BPF_ENABLE_STATS fd, which the sysctl does not
// reflect.
func SysctlBPFStatsEnabled() bool {
	b, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	return err == nil && string(bytes.TrimSpace(b)) == "1"
}

// collectPrograms reports each program's statistics. While statistics are
// disabled the kernel leaves run count and time at zero, which would read as
// "never ran", so those are reported only while enabled; recursion misses
// are always counted.
func (e *Exporter) collectPrograms(ch chan<- prometheus.Metric) error {
	enabled := e.cfg.BPFStatsEnabled()
	ch <- prometheus.MustNewConstMetric(statsEnabledDesc, prometheus.GaugeValue, b2f(enabled))
	var errs []error
	for name, p := range e.cfg.Programs {
		st, err := p.Stats()
		if err != nil {
			errs = append(errs, fmt.Errorf("program %s: %w", name, err))
			continue
		}
		ch <- prometheus.MustNewConstMetric(programMissesDesc, prometheus.CounterValue, float64(st.RecursionMisses), name)
		if enabled {
			ch <- prometheus.MustNewConstMetric(programRunsDesc, prometheus.CounterValue, float64(st.RunCount), name)
			ch <- prometheus.MustNewConstMetric(programRunTimeDesc, prometheus.CounterValue, st.Runtime.Seconds(), name)
		}
	}
	return errors.Join(errs...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
