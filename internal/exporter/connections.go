// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"cmp"
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/kube"
	"github.com/stacktop/stacktop/internal/termsafe"
)

// ConnSource yields connection snapshots. Each call returns every live
// connection, plus each connection closed since the previous call exactly
// once with its final totals; Lost and MapFull count since start. The
// records are appended to records[:0] (the previous snapshot's, lent back).
type ConnSource interface {
	SnapshotInto(records []conn.Record) (conn.Snapshot, error)
}

// groupIdleTTL is how long an aggregate (comm, cgroup, protocol) outlives its
// last connection. Past it the series go away, so a host that runs many
// short-lived containers does not accumulate series forever.
const groupIdleTTL = 15 * time.Minute

// rttBoundsMicros are the RTT histogram's upper bounds: 8 µs doubling up to
// about 4.2 s, which spans loopback to intercontinental paths.
var rttBoundsMicros = func() [20]uint64 {
	var b [20]uint64
	for i := range b {
		b[i] = 8 << i
	}
	return b
}()

// Connections folds connection snapshots into per-process (comm) and
// per-cgroup aggregates. Its counters never go backwards: each snapshot adds,
// per connection, only what grew since that connection was last seen, so
// traffic of connections that closed between two scrapes is kept, and a
// connection's totals are never counted twice.
type Connections struct {
	limit     int  // per-connection series to export; 0 exports none
	maxGroups int  // aggregates with series of their own; 0 is no limit
	readWait  bool // ExportReadWait

	mu     sync.Mutex
	last   map[connKey]counters // totals at the previous snapshot, per live connection
	spare  map[connKey]counters // becomes last at the next snapshot
	groups map[groupKey]*group
	folded map[groupKey]time.Time // aggregates beyond maxGroups, counted in the other series; last active
	open   map[openKey]int        // live connections per state, from the latest snapshot
	live   []conn.Record          // live connections of the latest snapshot, kept for per-connection series
	// readWaitSeen are the sockets whose read wait this snapshot added.
	readWaitSeen map[*hist.Wait]struct{}
	lost         uint64
	mapFull      uint64
	err          error // the latest snapshot's error, reported at the next scrape
}

// NewConnections returns an empty aggregate. perConnectionLimit > 0 also
// exports per-connection series for that many connections, the busiest
// first; 0 keeps cardinality bounded by processes and cgroups.
func NewConnections(perConnectionLimit int) *Connections {
	return &Connections{
		limit:  perConnectionLimit,
		last:   map[connKey]counters{},
		spare:  map[connKey]counters{},
		groups: map[groupKey]*group{},
		folded: map[groupKey]time.Time{},
		open:   map[openKey]int{},

		readWaitSeen: map[*hist.Wait]struct{}{},
	}
}

// DefaultMaxSeries is how many (comm, cgroup, proto) aggregates get series
// of their own unless --connections.max-series says otherwise: far more than the
// programs and containers of one host, far fewer than a local user can make
// up by renaming processes.
const DefaultMaxSeries = 1000

// otherLabel is the comm and cgroup of the series that aggregates beyond
// the limit are folded into. No cgroup path can be mistaken for it: paths
// start with "/".
const otherLabel = "other"

// LimitSeries gives at most n (comm, cgroup, proto) aggregates series of
// their own (0: no limit). Aggregates that appear beyond the limit are
// counted in the series with comm and cgroup "other", and how many there are
// in stacktop_folded_aggregates; when an aggregate expires, its place goes
// to the next new one. Call it before the first Add.
func (c *Connections) LimitSeries(n int) { c.maxGroups = n }

// connKey identifies a connection across snapshots. The namespace is part of
// it: containers reuse the same addresses, loopback above all. So is the
// socket's cookie: a connection may reuse the addresses and ports of one
// that closed a moment before (connect() takes over a TIME_WAIT socket's
// port, on loopback within the same second), and both can be in one
// snapshot, or the old one in the last, the new one in this.
type connKey struct {
	proto         string
	netns         uint32
	cookie        uint64
	local, remote netip.AddrPort
}

// groupKey is an aggregate's identity. The pod's names follow from the
// cgroup, so they add labels but not series.
type groupKey struct {
	comm, cgroup, proto string
	pod                 kube.Names
}

// labels are the label values of groupLabels, or with proto false those of
// the TCP-only series.
func (k groupKey) labels(proto bool, more ...string) []string {
	l := []string{k.comm, k.cgroup}
	if proto {
		l = append(l, k.proto)
	}
	l = append(l, more...)
	return append(l, k.pod.Namespace, k.pod.Pod, k.pod.Container)
}

type openKey struct {
	groupKey
	state string
}

// counters are a connection's cumulative totals, or the growth between two
// snapshots of them.
type counters struct{ bytesIn, bytesOut, packetsIn, packetsOut, retrans, dropsIn uint64 }

func countersOf(r *conn.Record) counters {
	return counters{r.BytesIn, r.BytesOut, r.PacketsIn, r.PacketsOut, uint64(r.Retrans), r.DropsIn}
}

// since returns the growth from prev to c. A total that went down means the
// kernel entry was reused for a new connection, whose whole total is growth.
func (c counters) since(prev counters) counters {
	grow := func(now, before uint64) uint64 {
		if now < before {
			return now
		}
		return now - before
	}
	return counters{
		grow(c.bytesIn, prev.bytesIn), grow(c.bytesOut, prev.bytesOut),
		grow(c.packetsIn, prev.packetsIn), grow(c.packetsOut, prev.packetsOut),
		grow(c.retrans, prev.retrans), grow(c.dropsIn, prev.dropsIn),
	}
}

func (c *counters) add(d counters) {
	c.bytesIn += d.bytesIn
	c.bytesOut += d.bytesOut
	c.packetsIn += d.packetsIn
	c.packetsOut += d.packetsOut
	c.retrans += d.retrans
	c.dropsIn += d.dropsIn
}

// group is the aggregate of one (comm, cgroup, protocol).
type group struct {
	totals         counters
	opened, closed uint64
	rtt            rttHistogram
	readWait       hist.Wait // read waits of its sockets (ExportReadWait)
	lastActive     time.Time
}

// rttHistogram counts smoothed-RTT samples per bucket (not cumulative); the
// extra last bucket holds samples above every bound.
type rttHistogram struct {
	buckets  [len(rttBoundsMicros) + 1]uint64
	sumMicro uint64
}

func (h *rttHistogram) observe(us uint32) {
	i, _ := slices.BinarySearch(rttBoundsMicros[:], uint64(us))
	h.buckets[i]++
	h.sumMicro += uint64(us)
}

// Poll adds a snapshot from src now and then every interval until ctx ends.
// Snapshots are taken on this fixed clock rather than per scrape, so RTT
// sampling and totals do not depend on how many Prometheus servers scrape.
func (c *Connections) Poll(ctx context.Context, src ConnSource, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var records []conn.Record // Add copies what it keeps
	for {
		s, err := src.SnapshotInto(records)
		records = s.Records
		if err != nil {
			slog.Warn("connection snapshot failed", "err", err)
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
		} else {
			c.Add(s)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Add folds one snapshot into the aggregates.
//
// A connection seen for the first time counts in full, unless it is partial
// (it existed before tracking started): its totals may include traffic from
// before stacktop ran, so only its growth from this snapshot on is counted,
// and it is not counted as opened.
func (c *Connections) Add(s conn.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = nil
	c.lost = max(c.lost, s.Lost)
	c.mapFull = max(c.mapFull, s.MapFull)
	seen := c.spare // reused: a snapshot every few seconds should not churn the heap
	clear(seen)
	clear(c.readWaitSeen)
	clear(c.open)
	c.live = c.live[:0]
	for i := range s.Records {
		r := &s.Records[i]
		k := connKey{r.Proto, r.Netns, r.Cookie, netip.AddrPortFrom(r.LocalAddr, r.LocalPort), netip.AddrPortFrom(r.RemoteAddr, r.RemotePort)}
		gk := c.groupKey(r, s.Time)
		g := c.groups[gk]
		if g == nil {
			g = &group{}
			c.groups[gk] = g
		}
		g.lastActive = s.Time
		now := countersOf(r)
		switch prev, known := c.last[k]; {
		case known:
			g.totals.add(now.since(prev))
		case !r.Partial:
			g.totals.add(now)
			g.opened++
		}
		if r.Proto == "tcp" && r.RTTus > 0 {
			g.rtt.observe(r.RTTus)
		}
		c.addReadWait(g, r)
		if r.Event == conn.Closed {
			g.closed++
			continue
		}
		seen[k] = now
		c.open[openKey{gk, r.State}]++
		if c.limit > 0 {
			c.live = append(c.live, *r)
		}
	}
	// Connections missing without a close event (evicted by the tracker)
	// are forgotten; what they transferred so far stays counted.
	c.last, c.spare = seen, c.last
	for gk, g := range c.groups {
		if s.Time.Sub(g.lastActive) > groupIdleTTL {
			delete(c.groups, gk)
		}
	}
	for gk, last := range c.folded {
		if s.Time.Sub(last) > groupIdleTTL {
			delete(c.folded, gk)
		}
	}
}

// groupKey returns the aggregate r counts in: its own, or, when the limit is
// reached and r's has no series yet, the other series of its protocol.
func (c *Connections) groupKey(r *conn.Record, now time.Time) groupKey {
	// Names become label values, which must be valid UTF-8.
	gk := groupKey{termsafe.ValidUTF8(r.Comm), termsafe.ValidUTF8(r.Cgroup), r.Proto, r.Names}
	if c.maxGroups == 0 || c.groups[gk] != nil {
		return gk
	}
	own := len(c.groups)
	for _, proto := range []string{"tcp", "udp"} {
		if c.groups[groupKey{comm: otherLabel, cgroup: otherLabel, proto: proto}] != nil {
			own--
		}
	}
	if own < c.maxGroups {
		delete(c.folded, gk)
		return gk
	}
	c.folded[gk] = now
	return groupKey{comm: otherLabel, cgroup: otherLabel, proto: r.Proto}
}

var (
	podLabels         = []string{"namespace", "pod", "container"} // empty outside pods
	groupLabels       = append([]string{"comm", "cgroup", "proto"}, podLabels...)
	receivedBytesDesc = prometheus.NewDesc("stacktop_received_bytes_total",
		"Bytes received by sockets, per process name, cgroup and protocol.", groupLabels, nil)
	sentBytesDesc = prometheus.NewDesc("stacktop_sent_bytes_total",
		"Bytes sent by sockets, per process name, cgroup and protocol.", groupLabels, nil)
	receivedPacketsDesc = prometheus.NewDesc("stacktop_received_packets_total",
		"Packets (TCP segments, UDP datagrams) received, per process name, cgroup and protocol.", groupLabels, nil)
	sentPacketsDesc = prometheus.NewDesc("stacktop_sent_packets_total",
		"Packets (TCP segments, UDP datagrams) sent, per process name, cgroup and protocol.", groupLabels, nil)
	openedDesc = prometheus.NewDesc("stacktop_connections_opened_total",
		"Connections and UDP flows that started while stacktop ran.", groupLabels, nil)
	closedDesc = prometheus.NewDesc("stacktop_connections_closed_total",
		"Connections and UDP flows that ended while stacktop ran.", groupLabels, nil)
	openDesc = prometheus.NewDesc("stacktop_open_connections",
		"Live connections and UDP flows by state at the latest snapshot.",
		append([]string{"comm", "cgroup", "proto", "state"}, podLabels...), nil)
	retransDesc = prometheus.NewDesc("stacktop_tcp_retransmits_total",
		"TCP segments retransmitted.", append([]string{"comm", "cgroup"}, podLabels...), nil)
	udpDropsDesc = prometheus.NewDesc("stacktop_udp_receive_drops_total",
		"UDP datagrams that reached a socket and were dropped there (receive buffer full, socket memory).",
		append([]string{"comm", "cgroup"}, podLabels...), nil)
	rttDesc = prometheus.NewDesc("stacktop_tcp_rtt_seconds",
		"Smoothed RTT of TCP connections, sampled once per connection per snapshot interval and at close.",
		append([]string{"comm", "cgroup"}, podLabels...), nil)
	lostDesc = prometheus.NewDesc("stacktop_lost_events_total",
		"Connection events stacktop never saw: closed events with no room in the ring buffer or between refreshes, and runs of its programs the kernel skipped.", []string{"source"}, nil)
	foldedDesc = prometheus.NewDesc("stacktop_folded_aggregates",
		`Distinct (comm, cgroup, proto) aggregates beyond --connections.max-series, counted in the comm="other", cgroup="other" series instead of their own.`, nil, nil)
	mapFullDesc = prometheus.NewDesc("stacktop_map_full_total",
		"Kernel-side updates dropped because a BPF map was full.", []string{"source"}, nil)

	perConnLabels = append([]string{"proto", "local_addr", "local_port", "remote_addr", "remote_port", "pid", "comm", "cgroup"}, podLabels...)
	connRecvDesc  = prometheus.NewDesc("stacktop_connection_received_bytes_total",
		"Bytes received on one connection (only with --connections.per-connection-series).", perConnLabels, nil)
	connSentDesc = prometheus.NewDesc("stacktop_connection_sent_bytes_total",
		"Bytes sent on one connection (only with --connections.per-connection-series).", perConnLabels, nil)
	connRTTDesc = prometheus.NewDesc("stacktop_connection_rtt_seconds",
		"Smoothed RTT of one TCP connection (only with --connections.per-connection-series).", perConnLabels, nil)
	connOmittedDesc = prometheus.NewDesc("stacktop_connections_not_exported",
		"Live connections left out of the per-connection series by the limit.", nil, nil)
)

func describeConnections(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		receivedBytesDesc, sentBytesDesc, receivedPacketsDesc, sentPacketsDesc, openedDesc, closedDesc,
		openDesc, retransDesc, udpDropsDesc, rttDesc, readWaitDesc, lostDesc, foldedDesc, mapFullDesc, connRecvDesc, connSentDesc, connRTTDesc,
		connOmittedDesc,
	} {
		ch <- d
	}
}

func (c *Connections) collect(ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	// What says whether the data is whole goes first: nothing about one
	// aggregate can take it away.
	counter(lostDesc, c.lost, "connections")
	ch <- prometheus.MustNewConstMetric(foldedDesc, prometheus.GaugeValue, float64(len(c.folded)))
	counter(mapFullDesc, c.mapFull, "connections")
	for k, g := range c.groups {
		labels := k.labels(true)
		counter(receivedBytesDesc, g.totals.bytesIn, labels...)
		counter(sentBytesDesc, g.totals.bytesOut, labels...)
		counter(receivedPacketsDesc, g.totals.packetsIn, labels...)
		counter(sentPacketsDesc, g.totals.packetsOut, labels...)
		counter(openedDesc, g.opened, labels...)
		counter(closedDesc, g.closed, labels...)
		if k.proto == "tcp" {
			counter(retransDesc, g.totals.retrans, k.labels(false)...)
			ch <- g.rtt.metric(k.labels(false)...)
		} else {
			counter(udpDropsDesc, g.totals.dropsIn, k.labels(false)...)
		}
		if c.readWait && g.readWait.Count() > 0 {
			ch <- g.readWaitMetric(labels)
		}
	}
	for k, n := range c.open {
		ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(n), k.labels(true, k.state)...)
	}
	if c.limit > 0 {
		c.collectPerConnection(ch)
	}
	return c.err
}

func (h *rttHistogram) metric(labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(rttBoundsMicros))
	var cumulative uint64
	for i, le := range rttBoundsMicros {
		cumulative += h.buckets[i]
		buckets[float64(le)/1e6] = cumulative
	}
	count := cumulative + h.buckets[len(rttBoundsMicros)]
	sum := float64(h.sumMicro) / 1e6
	classic := prometheus.MustNewConstHistogram(rttDesc, count, sum, buckets, labels...)
	return withNative(classic, rttBuckets, h.buckets[:], count, sum, labels)
}

// collectPerConnection exports the busiest live connections, by bytes moved
// (ties by their addresses, so that the same ones are chosen every scrape
// whatever order the source gave them in).
func (c *Connections) collectPerConnection(ch chan<- prometheus.Metric) {
	busiest := slices.Clone(c.live)
	slices.SortFunc(busiest, func(a, b conn.Record) int {
		return cmp.Or(cmp.Compare(b.BytesIn+b.BytesOut, a.BytesIn+a.BytesOut),
			netip.AddrPortFrom(a.LocalAddr, a.LocalPort).Compare(netip.AddrPortFrom(b.LocalAddr, b.LocalPort)),
			netip.AddrPortFrom(a.RemoteAddr, a.RemotePort).Compare(netip.AddrPortFrom(b.RemoteAddr, b.RemotePort)),
			cmp.Compare(a.Netns, b.Netns))
	})
	omitted := max(0, len(busiest)-c.limit)
	busiest = busiest[:len(busiest)-omitted]
	for _, r := range busiest {
		labels := []string{r.Proto, r.LocalAddr.String(), strconv.Itoa(int(r.LocalPort)),
			r.RemoteAddr.String(), strconv.Itoa(int(r.RemotePort)),
			strconv.FormatUint(uint64(r.PID), 10), termsafe.ValidUTF8(r.Comm), termsafe.ValidUTF8(r.Cgroup),
			r.Namespace, r.Pod, r.Container}
		ch <- prometheus.MustNewConstMetric(connRecvDesc, prometheus.CounterValue, float64(r.BytesIn), labels...)
		ch <- prometheus.MustNewConstMetric(connSentDesc, prometheus.CounterValue, float64(r.BytesOut), labels...)
		if r.Proto == "tcp" {
			ch <- prometheus.MustNewConstMetric(connRTTDesc, prometheus.GaugeValue, float64(r.RTTus)/1e6, labels...)
		}
	}
	ch <- prometheus.MustNewConstMetric(connOmittedDesc, prometheus.GaugeValue, float64(omitted))
}
