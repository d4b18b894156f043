// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/stacktop/stacktop/internal/conn"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// tcp builds a connection record of process curl in cgroup /user.slice from
// local port lport to 198.18.100.2:80.
func tcp(lport uint16, ev conn.Event, in, out uint64) conn.Record {
	return conn.Record{
		Event: ev, Proto: "tcp", Family: 4, State: "ESTABLISHED",
		LocalAddr: netip.MustParseAddr("198.18.100.1"), LocalPort: lport,
		RemoteAddr: netip.MustParseAddr("198.18.100.2"), RemotePort: 80,
		PID: 42, Comm: "curl", Cgroup: "/user.slice",
		BytesIn: in, BytesOut: out, PacketsIn: in / 100, PacketsOut: out / 100,
	}
}

func snap(at time.Duration, recs ...conn.Record) conn.Snapshot {
	return conn.Snapshot{Time: t0.Add(at), Records: recs}
}

func compare(t *testing.T, c prometheus.Collector, want string, names ...string) {
	t.Helper()
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// connExporter exposes only the connection metrics, as serve does.
func connExporter(c *Connections) *Exporter { return New(Config{Connections: c}) }

// A connection that closes between two scrapes keeps its final totals in the
// process's counters, and a new one adds on top.
func TestConnectionTotalsSurviveClose(t *testing.T) {
	c := NewConnections(0)
	e := connExporter(c)
	c.Add(snap(0, tcp(1000, conn.New, 100, 200)))
	compare(t, e, `
# HELP stacktop_received_bytes_total Bytes received by sockets, per process name, cgroup and protocol.
# TYPE stacktop_received_bytes_total counter
stacktop_received_bytes_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 100
`, "stacktop_received_bytes_total")

	c.Add(snap(time.Second, tcp(1000, conn.Closed, 150, 300), tcp(1001, conn.New, 10, 20)))
	c.Add(snap(2*time.Second, tcp(1001, conn.Update, 15, 25)))
	compare(t, e, `
# HELP stacktop_received_bytes_total Bytes received by sockets, per process name, cgroup and protocol.
# TYPE stacktop_received_bytes_total counter
stacktop_received_bytes_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 165
# HELP stacktop_sent_bytes_total Bytes sent by sockets, per process name, cgroup and protocol.
# TYPE stacktop_sent_bytes_total counter
stacktop_sent_bytes_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 325
# HELP stacktop_received_packets_total Packets (TCP segments, UDP datagrams) received, per process name, cgroup and protocol.
# TYPE stacktop_received_packets_total counter
stacktop_received_packets_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 1
# HELP stacktop_connections_opened_total Connections and UDP flows that started while stacktop ran.
# TYPE stacktop_connections_opened_total counter
stacktop_connections_opened_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 2
# HELP stacktop_connections_closed_total Connections and UDP flows that ended while stacktop ran.
# TYPE stacktop_connections_closed_total counter
stacktop_connections_closed_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 1
# HELP stacktop_open_connections Live connections and UDP flows by state at the latest snapshot.
# TYPE stacktop_open_connections gauge
stacktop_open_connections{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp",state="ESTABLISHED"} 1
`, "stacktop_received_bytes_total", "stacktop_sent_bytes_total", "stacktop_received_packets_total",
		"stacktop_connections_opened_total", "stacktop_connections_closed_total", "stacktop_open_connections")
}

// A connection that opened and closed between two snapshots is counted in
// full, once.
func TestConnectionOpenedAndClosedWithinOneInterval(t *testing.T) {
	c := NewConnections(0)
	c.Add(snap(0, tcp(1000, conn.Closed, 4096, 512)))
	c.Add(snap(time.Second))
	compare(t, connExporter(c), `
# HELP stacktop_received_bytes_total Bytes received by sockets, per process name, cgroup and protocol.
# TYPE stacktop_received_bytes_total counter
stacktop_received_bytes_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 4096
# HELP stacktop_connections_opened_total Connections and UDP flows that started while stacktop ran.
# TYPE stacktop_connections_opened_total counter
stacktop_connections_opened_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 1
# HELP stacktop_connections_closed_total Connections and UDP flows that ended while stacktop ran.
# TYPE stacktop_connections_closed_total counter
stacktop_connections_closed_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 1
`, "stacktop_received_bytes_total", "stacktop_connections_opened_total", "stacktop_connections_closed_total",
		"stacktop_open_connections")
}

// A partial connection's first totals may include traffic from before
// stacktop started: only its growth afterwards is counted, and it was not
// opened under our watch.
func TestPartialConnectionCountsOnlyGrowth(t *testing.T) {
	c := NewConnections(0)
	old := tcp(1000, conn.Update, 1_000_000, 5_000)
	old.Partial = true
	c.Add(snap(0, old))
	old.BytesIn, old.Event = 1_000_700, conn.Closed
	c.Add(snap(time.Second, old))
	compare(t, connExporter(c), `
# HELP stacktop_received_bytes_total Bytes received by sockets, per process name, cgroup and protocol.
# TYPE stacktop_received_bytes_total counter
stacktop_received_bytes_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 700
# HELP stacktop_connections_opened_total Connections and UDP flows that started while stacktop ran.
# TYPE stacktop_connections_opened_total counter
stacktop_connections_opened_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 0
# HELP stacktop_connections_closed_total Connections and UDP flows that ended while stacktop ran.
# TYPE stacktop_connections_closed_total counter
stacktop_connections_closed_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 1
`, "stacktop_received_bytes_total", "stacktop_connections_opened_total", "stacktop_connections_closed_total")
}

// Connections with the same addresses in two network namespaces (loopback in
// two containers) are two connections.
func TestSameAddressesInTwoNamespaces(t *testing.T) {
	c := NewConnections(0)
	a, b := tcp(1000, conn.New, 100, 0), tcp(1000, conn.New, 40, 0)
	a.Netns, b.Netns = 1, 2
	c.Add(snap(0, a, b))
	a.BytesIn, b.BytesIn = 110, 45
	c.Add(snap(time.Second, a, b))
	compare(t, connExporter(c), `
# HELP stacktop_received_bytes_total Bytes received by sockets, per process name, cgroup and protocol.
# TYPE stacktop_received_bytes_total counter
stacktop_received_bytes_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 155
`, "stacktop_received_bytes_total")
}

// A connection that takes over the addresses and ports of one that just
// closed (connect() reuses a TIME_WAIT socket's port) is another
// connection: counted in full and as opened, not as the old one's growth.
func TestReusedAddressesAreANewConnection(t *testing.T) {
	c := NewConnections(0)
	old, reuse := tcp(1000, conn.New, 0, 10), tcp(1000, conn.Closed, 0, 10)
	old.Cookie, reuse.Cookie = 7, 8
	c.Add(snap(0, old))
	old.Event = conn.Closed
	c.Add(snap(time.Second, old, reuse))
	compare(t, connExporter(c), `
# HELP stacktop_sent_bytes_total Bytes sent by sockets, per process name, cgroup and protocol.
# TYPE stacktop_sent_bytes_total counter
stacktop_sent_bytes_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 20
# HELP stacktop_connections_opened_total Connections and UDP flows that started while stacktop ran.
# TYPE stacktop_connections_opened_total counter
stacktop_connections_opened_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 2
# HELP stacktop_connections_closed_total Connections and UDP flows that ended while stacktop ran.
# TYPE stacktop_connections_closed_total counter
stacktop_connections_closed_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 2
`, "stacktop_sent_bytes_total", "stacktop_connections_opened_total", "stacktop_connections_closed_total")
}

// Growth is credited to the process that owns the connection when it grows:
// nothing is taken back from the previous owner.
func TestOwnerChangeMovesOnlyNewGrowth(t *testing.T) {
	c := NewConnections(0)
	r := tcp(1000, conn.New, 100, 0)
	r.Comm = "bash"
	c.Add(snap(0, r))
	r.Comm, r.BytesIn = "curl", 130
	c.Add(snap(time.Second, r))
	compare(t, connExporter(c), `
# HELP stacktop_received_bytes_total Bytes received by sockets, per process name, cgroup and protocol.
# TYPE stacktop_received_bytes_total counter
stacktop_received_bytes_total{cgroup="/user.slice",comm="bash",container="",namespace="",pod="",proto="tcp"} 100
stacktop_received_bytes_total{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",proto="tcp"} 30
`, "stacktop_received_bytes_total")
}

// Random connection lifecycles: every counter only grows from scrape to
// scrape, and at the end equals the sum of all connections' final totals.
func TestCountersNeverGoBackwards(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewConnections(0)
	e := connExporter(c)
	live := map[uint16]*conn.Record{}
	var finalIn, finalOut uint64
	prev := map[string]float64{}
	nextPort := uint16(1000)
	for step := range 300 {
		var recs []conn.Record
		for p, r := range live {
			r.Event = conn.Update
			r.BytesIn += uint64(rng.IntN(5000))
			r.BytesOut += uint64(rng.IntN(5000))
			if rng.IntN(4) == 0 {
				r.Event = conn.Closed
				finalIn += r.BytesIn
				finalOut += r.BytesOut
				delete(live, p)
			}
			recs = append(recs, *r)
		}
		for range rng.IntN(3) {
			r := tcp(nextPort, conn.New, uint64(rng.IntN(5000)), uint64(rng.IntN(5000)))
			r.Comm = []string{"nginx", "curl"}[rng.IntN(2)]
			nextPort++
			if rng.IntN(3) == 0 { // opened and closed between snapshots
				r.Event = conn.Closed
				finalIn += r.BytesIn
				finalOut += r.BytesOut
			} else {
				live[r.LocalPort] = &r
			}
			recs = append(recs, r)
		}
		c.Add(snap(time.Duration(step)*time.Second, recs...))
		for key, v := range counterValues(t, e) {
			if v < prev[key] {
				t.Fatalf("step %d: %s went from %v to %v", step, key, prev[key], v)
			}
			prev[key] = v
		}
	}
	for _, r := range live {
		finalIn += r.BytesIn
		finalOut += r.BytesOut
	}
	var gotIn, gotOut float64
	for key, v := range prev {
		switch {
		case strings.HasPrefix(key, "stacktop_received_bytes_total"):
			gotIn += v
		case strings.HasPrefix(key, "stacktop_sent_bytes_total"):
			gotOut += v
		}
	}
	if gotIn != float64(finalIn) || gotOut != float64(finalOut) {
		t.Errorf("received %v sent %v, want %d %d", gotIn, gotOut, finalIn, finalOut)
	}
}

// counterValues returns every counter series' value, keyed by name and labels.
func counterValues(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetType() != dto.MetricType_COUNTER {
			continue
		}
		for _, m := range mf.Metric {
			out[fmt.Sprint(mf.GetName(), m.Label)] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestIdleGroupsExpire(t *testing.T) {
	c := NewConnections(0)
	e := connExporter(c)
	c.Add(snap(0, tcp(1000, conn.Closed, 1, 1)))
	c.Add(snap(groupIdleTTL))
	if n := testutil.CollectAndCount(e, "stacktop_received_bytes_total"); n != 1 {
		t.Fatalf("series right at the idle limit: %d, want 1", n)
	}
	c.Add(snap(groupIdleTTL + time.Second))
	if n := testutil.CollectAndCount(e, "stacktop_received_bytes_total"); n != 0 {
		t.Fatalf("series after the idle limit: %d, want 0", n)
	}
}

func TestRTTHistogramAndLossCounters(t *testing.T) {
	c := NewConnections(0)
	a, b := tcp(1000, conn.New, 0, 0), tcp(1001, conn.New, 0, 0)
	a.RTTus, b.RTTus = 8, 100 // 8 µs sits on the first bound; 100 µs in (64, 128]
	s := snap(0, a, b)
	s.Lost, s.MapFull = 3, 4
	c.Add(s)
	s = snap(time.Second, b) // one more sample of b; a vanished without a close
	s.Lost = 5
	c.Add(s)
	compare(t, connExporter(c), `
# HELP stacktop_tcp_rtt_seconds Smoothed RTT of TCP connections, sampled once per connection per snapshot interval and at close.
# TYPE stacktop_tcp_rtt_seconds histogram
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="8e-06"} 1
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="1.6e-05"} 1
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="3.2e-05"} 1
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="6.4e-05"} 1
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.000128"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.000256"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.000512"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.001024"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.002048"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.004096"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.008192"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.016384"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.032768"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.065536"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.131072"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.262144"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="0.524288"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="1.048576"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="2.097152"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="4.194304"} 3
stacktop_tcp_rtt_seconds_bucket{cgroup="/user.slice",comm="curl",container="",namespace="",pod="",le="+Inf"} 3
stacktop_tcp_rtt_seconds_sum{cgroup="/user.slice",comm="curl",container="",namespace="",pod=""} 0.000208
stacktop_tcp_rtt_seconds_count{cgroup="/user.slice",comm="curl",container="",namespace="",pod=""} 3
# HELP stacktop_lost_events_total Connection events stacktop never saw: closed events with no room in the ring buffer or between refreshes, and runs of its programs the kernel skipped.
# TYPE stacktop_lost_events_total counter
stacktop_lost_events_total{source="connections"} 5
# HELP stacktop_map_full_total Kernel-side updates dropped because a BPF map was full.
# TYPE stacktop_map_full_total counter
stacktop_map_full_total{source="connections"} 4
`, "stacktop_tcp_rtt_seconds", "stacktop_lost_events_total", "stacktop_map_full_total")
}

func TestPerConnectionSeriesAreLimited(t *testing.T) {
	c := NewConnections(2)
	c.Add(snap(0, tcp(1000, conn.New, 10, 0), tcp(1001, conn.New, 3000, 0), tcp(1002, conn.New, 200, 0),
		tcp(1003, conn.Closed, 99999, 0)))
	compare(t, connExporter(c), `
# HELP stacktop_connection_received_bytes_total Bytes received on one connection (only with --connections.per-connection-series).
# TYPE stacktop_connection_received_bytes_total counter
stacktop_connection_received_bytes_total{cgroup="/user.slice",comm="curl",container="",local_addr="198.18.100.1",local_port="1001",namespace="",pid="42",pod="",proto="tcp",remote_addr="198.18.100.2",remote_port="80"} 3000
stacktop_connection_received_bytes_total{cgroup="/user.slice",comm="curl",container="",local_addr="198.18.100.1",local_port="1002",namespace="",pid="42",pod="",proto="tcp",remote_addr="198.18.100.2",remote_port="80"} 200
# HELP stacktop_connections_not_exported Live connections left out of the per-connection series by the limit.
# TYPE stacktop_connections_not_exported gauge
stacktop_connections_not_exported 1
`, "stacktop_connection_received_bytes_total", "stacktop_connections_not_exported")
	if n := testutil.CollectAndCount(connExporter(NewConnections(0)), "stacktop_connection_received_bytes_total"); n != 0 {
		t.Errorf("per-connection series without the flag: %d", n)
	}
}
