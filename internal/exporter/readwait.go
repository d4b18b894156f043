// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
)

// readWaitDesc is the read wait of each aggregate: how long received data
// waited in the host until the process read it (serve --collector.read-wait).
var readWaitDesc = prometheus.NewDesc("stacktop_read_wait_seconds",
	"Time received data waited in the host until the application read it: one sample per socket read (tcp-socket-read, udp-socket-read), per process name, cgroup and protocol (log2 buckets).",
	groupLabels, nil)

// readWaitBounds are the upper bounds, in seconds, of the read-wait buckets
// below the last one, which also holds every larger value (only in +Inf).
var readWaitBounds = func() [hist.WaitBuckets - 1]float64 {
	var b [hist.WaitBuckets - 1]float64
	for j := range b {
		b[j] = float64(hist.WaitUpperBound(j)) / 1e9
	}
	return b
}()

// readWaitBuckets: bucket j ends at 2^(10+j) ns.
var readWaitBuckets = log2Layout{firstExp: hist.WaitFirstSlot, unitExp: -30}

// ExportReadWait exports stacktop_read_wait_seconds from the records' read
// waits (conntrack.Config.ReadWait). Call it before the first Add.
func (c *Connections) ExportReadWait() { c.readWait = true }

// addReadWait adds r's read wait to g, once per socket per snapshot: the
// UDP flows of one socket share their socket's histogram, and so may two
// records of one TCP socket. Told apart by the histogram itself, which the
// join hands out once per socket and refresh (found by cookie, or before
// 5.12 by address), not by r.Cookie: keyed by the cookie, a 5.10 guest
// once exported a reader's 5 reads as 6 (TestServeReadWait; which two
// records met was not found).
func (c *Connections) addReadWait(g *group, r *conn.Record) {
	if r.ReadWait == nil {
		return
	}
	if _, dup := c.readWaitSeen[r.ReadWait]; dup {
		return
	}
	c.readWaitSeen[r.ReadWait] = struct{}{}
	g.readWait.Add(r.ReadWait)
}

func (g *group) readWaitMetric(labels []string) prometheus.Metric {
	w := &g.readWait
	sum := float64(w.SumNs) / 1e9
	classic := cumulativeHistogram(readWaitDesc, w.Buckets[:], readWaitBounds[:], sum, labels)
	return withNative(classic, readWaitBuckets, w.Buckets[:], w.Count(), sum, labels)
}
