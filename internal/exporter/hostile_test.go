// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/latency"
)

// TestHostileNamesAreValidLabels: any local user can name a thread or a
// delegated cgroup with bytes that are not UTF-8. Such a connection is
// exported under the escaped names, beside every other series, and the
// scrape has not failed.
func TestHostileNamesAreValidLabels(t *testing.T) {
	c := NewConnections(1)
	hostile := tcp(1000, conn.New, 100, 200)
	hostile.Comm, hostile.Cgroup = "bad\xff\xfe", "/user.slice/x\xc3"
	c.Add(conn.Snapshot{Time: t0, Records: []conn.Record{hostile, tcp(1001, conn.New, 10, 20)}, Lost: 3})
	compare(t, connExporter(c), `
# HELP stacktop_received_bytes_total Bytes received by sockets, per process name, cgroup and protocol.
# TYPE stacktop_received_bytes_total counter
stacktop_received_bytes_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 10
stacktop_received_bytes_total{cgroup="/user.slice/x\\xc3",comm="bad\\xff\\xfe",container="",namespace="",pod="",proto="tcp"} 100
# HELP stacktop_connection_sent_bytes_total Bytes sent on one connection (only with --connections.per-connection-series).
# TYPE stacktop_connection_sent_bytes_total counter
stacktop_connection_sent_bytes_total{cgroup="/user.slice/x\\xc3",comm="bad\\xff\\xfe",container="",local_addr="198.18.100.1",local_port="1000",namespace="",pid="42",pod="",proto="tcp",remote_addr="198.18.100.2",remote_port="80"} 200
# HELP stacktop_lost_events_total Connection events stacktop never saw: closed events with no room in the ring buffer or between refreshes, and runs of its programs the kernel skipped.
# TYPE stacktop_lost_events_total counter
stacktop_lost_events_total{source="connections"} 3
# HELP stacktop_scrape_error 1 if the last scrape could not read the source (the error is logged), else 0.
# TYPE stacktop_scrape_error gauge
stacktop_scrape_error{source="bpf_programs"} 0
stacktop_scrape_error{source="connections"} 0
`, "stacktop_received_bytes_total", "stacktop_connection_sent_bytes_total", "stacktop_lost_events_total", "stacktop_scrape_error")
}

// panickingLatency fails as a source with a bug would.
type panickingLatency struct{}

func (panickingLatency) Read() ([]hist.Series, error)         { panic("broken source") }
func (panickingLatency) Counters() ([]latency.Counter, error) { return nil, nil }

// TestPanickingSourceIsAScrapeError: a source that panics is reported in
// stacktop_scrape_error, and the other sources' series are all still there.
func TestPanickingSourceIsAScrapeError(t *testing.T) {
	c := NewConnections(0)
	c.Add(snap(0, tcp(1000, conn.New, 100, 200)))
	e := New(Config{Latency: panickingLatency{}, Connections: c})
	compare(t, e, `
# HELP stacktop_received_bytes_total Bytes received by sockets, per process name, cgroup and protocol.
# TYPE stacktop_received_bytes_total counter
stacktop_received_bytes_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 100
# HELP stacktop_scrape_error 1 if the last scrape could not read the source (the error is logged), else 0.
# TYPE stacktop_scrape_error gauge
stacktop_scrape_error{source="bpf_programs"} 0
stacktop_scrape_error{source="connections"} 0
stacktop_scrape_error{source="latency"} 1
`, "stacktop_received_bytes_total", "stacktop_scrape_error")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gathering: %v", err)
	}
	if n, err := testutil.GatherAndCount(reg, "stacktop_lost_events_total"); err != nil || n != 1 {
		t.Errorf("stacktop_lost_events_total: %d series, err %v; want 1", n, err)
	}
}
