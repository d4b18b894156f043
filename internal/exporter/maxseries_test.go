// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stacktop/stacktop/internal/conn"
)

// Thousands of distinct process names (a local user renaming threads) give
// at most --connections.max-series aggregates series of their own; the rest are counted,
// byte for byte, in the "other" series, and how many in
// stacktop_folded_aggregates. When aggregates expire, new names get their
// places.
func TestMaxSeriesFoldsTheRestIntoOther(t *testing.T) {
	const names, limit = 5000, 100
	c := NewConnections(0)
	c.LimitSeries(limit)
	e := connExporter(c)
	var recs []conn.Record
	for i := range names {
		r := tcp(uint16(1000+i), conn.Closed, 10, 20)
		r.Comm = fmt.Sprintf("name-%04d", i)
		recs = append(recs, r)
	}
	c.Add(snap(0, recs...))
	if n := testutil.CollectAndCount(e, "stacktop_received_bytes_total"); n != limit+1 {
		t.Errorf("%d received-bytes series, want %d own and 1 other", n, limit)
	}
	compare(t, e, fmt.Sprintf(`
# HELP stacktop_folded_aggregates Distinct (comm, cgroup, proto) aggregates beyond --connections.max-series, counted in the comm="other", cgroup="other" series instead of their own.
# TYPE stacktop_folded_aggregates gauge
stacktop_folded_aggregates %d
`, names-limit), "stacktop_folded_aggregates")
	if got := valueOf(t, e, "stacktop_received_bytes_total", "other"); got != 10*(names-limit) {
		t.Errorf("other received %v bytes, want %d", got, 10*(names-limit))
	}
	if got := valueOf(t, e, "stacktop_received_bytes_total", "name-0000"); got != 10 {
		t.Errorf("name-0000 received %v bytes, want 10 (its own series)", got)
	}

	// An own aggregate keeps its series while active; a folded one stays
	// in other. After the idle TTL both expire and a new name is admitted.
	later := groupIdleTTL + time.Minute
	fresh := tcp(9, conn.New, 5, 5)
	fresh.Comm = "newcomer"
	c.Add(snap(later))
	c.Add(snap(later+time.Second, fresh))
	if got := valueOf(t, e, "stacktop_received_bytes_total", "newcomer"); got != 5 {
		t.Errorf("newcomer after expiry received %v bytes in its own series, want 5", got)
	}
	compare(t, e, `
# HELP stacktop_folded_aggregates Distinct (comm, cgroup, proto) aggregates beyond --connections.max-series, counted in the comm="other", cgroup="other" series instead of their own.
# TYPE stacktop_folded_aggregates gauge
stacktop_folded_aggregates 0
`, "stacktop_folded_aggregates")
}

// valueOf returns the value of the counter of family name whose comm is comm.
func valueOf(t *testing.T, e *Exporter, name, comm string) float64 {
	t.Helper()
	for _, m := range family(t, e, name).GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "comm" && l.GetValue() == comm {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s series of comm %q", name, comm)
	return 0
}
