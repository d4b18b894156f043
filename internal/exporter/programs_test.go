// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/promweb"
	"github.com/stacktop/stacktop/internal/testenv"
)

// loadProgram loads a socket filter that accepts nothing: the smallest
// program the kernel will run on demand through BPF_PROG_TEST_RUN. The
// exporter finds it among the programs the test process holds.
func loadProgram(t *testing.T) *ebpf.Program {
	t.Helper()
	testenv.RequireRoot(t)
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "stacktop_test", Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load test program: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// With statistics enabled the exporter reports exactly how often the kernel
// ran the program; with them disabled it reports no run metrics at all
// rather than zeros.
func TestProgramRunStatistics(t *testing.T) {
	p := loadProgram(t)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		t.Fatalf("enable BPF statistics: %v", err)
	}
	defer stats.Close()
	const runs = 7
	if _, err := p.Run(&ebpf.RunOptions{Data: make([]byte, 64), Repeat: runs}); err != nil {
		t.Fatalf("run test program: %v", err)
	}
	enabled := true
	e := New(Config{BPFStatsEnabled: func() bool { return enabled }})
	compare(t, e, fmt.Sprintf(`
# HELP stacktop_bpf_program_runs_total Times each BPF program ran (only while BPF statistics are enabled).
# TYPE stacktop_bpf_program_runs_total counter
stacktop_bpf_program_runs_total{program="stacktop_test"} %d
# HELP stacktop_bpf_stats_enabled 1 while the kernel collects BPF run statistics (sysctl kernel.bpf_stats_enabled or --bpf.stats), else 0.
# TYPE stacktop_bpf_stats_enabled gauge
stacktop_bpf_stats_enabled 1
`, runs), "stacktop_bpf_program_runs_total", "stacktop_bpf_stats_enabled")
	if n := testutil.CollectAndCount(e, "stacktop_bpf_program_run_seconds_total"); n != 1 {
		t.Errorf("run time series: %d, want 1", n)
	}

	enabled = false
	if n := testutil.CollectAndCount(e, "stacktop_bpf_program_runs_total", "stacktop_bpf_program_run_seconds_total"); n != 0 {
		t.Errorf("run metrics while statistics are disabled: %d series, want none", n)
	}
	if n := testutil.CollectAndCount(e, "stacktop_bpf_program_recursion_misses_total"); n != 1 {
		t.Errorf("recursion misses series: %d, want 1", n)
	}
}

// promlint finds nothing to complain about in any metric the exporter can
// produce, with every source populated.
func TestMetricsPassPromlint(t *testing.T) {
	e := fullExporter(t)
	problems, err := testutil.CollectAndLint(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	if n := testutil.CollectAndCount(e, "stacktop_bpf_program_runs_total", "netstack_latency_seconds",
		"stacktop_tcp_rtt_seconds", "stacktop_connection_rtt_seconds", "stacktop_latency_packets_total"); n != 5 {
		t.Errorf("linted %d of the 5 series that need every source populated", n)
	}
}

// docs/METRICS.md's tables list exactly the metrics the exporter describes.
func TestEveryMetricIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (counter|gauge|histogram) \\|").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	ch := make(chan *prometheus.Desc, 100)
	New(Config{}).Describe(ch)
	promweb.Describe(ch) // served beside the exporter by stacktop serve
	close(ch)
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		m := name.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		if !documented[m[1]] {
			t.Errorf("docs/METRICS.md does not document %s", m[1])
		}
		delete(documented, m[1])
	}
	for n := range documented {
		t.Errorf("docs/METRICS.md documents %s, which the exporter does not export", n)
	}
}

// fullExporter has every source populated, including a real BPF program.
func fullExporter(t *testing.T) *Exporter {
	loadProgram(t)
	c := NewConnections(10)
	r := tcp(1000, conn.New, 1, 2)
	r.RTTus = 50
	c.Add(snap(0, r))
	return New(Config{
		Latency: &fakeLatency{
			series:   []hist.Series{series("tcp-socket-read", "", "", map[int]uint64{12: 3}, 12000)},
			counters: []latency.Counter{{Hook: "tcp-socket-read", Reason: "recorded", Count: 3}},
		},
		Connections:     c,
		Backends:        []features.Choice{{Hook: "tcp-socket-read", Backend: features.Tracepoint}},
		BPFStatsEnabled: func() bool { return true },
		Version:         "v1", Revision: "abc",
	})
}
