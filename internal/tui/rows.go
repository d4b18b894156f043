// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/resolve"
)

// Row is one line of the table: a connection, or in the per-process view the
// sum of one process's connections.
type Row struct {
	conn.Record
	Local, Remote string // rendered endpoints, kept because sorting and filtering read them too
	Conns         int    // per-process view: open connections (closed ones still add their bytes)
	search        string // lower-cased text that the `/` filter matches against
}

func newRow(r conn.Record) Row {
	row := Row{Record: r}
	row.setEndpoints(nil)
	if r.Event != conn.Closed {
		row.Conns = 1
	}
	row.search = strings.ToLower(strings.Join([]string{
		row.Local, row.Remote, r.LocalAddr.Unmap().String(), r.RemoteAddr.Unmap().String(), r.RemoteHost,
		pidText(r.PID), r.Comm, r.Cgroup, r.Namespace, r.Pod, r.Container,
	}, " "))
	return row
}

// setEndpoints renders the row's endpoints, ports named by services where
// it names them (nil: numbers).
func (r *Row) setEndpoints(services resolve.Services) {
	port := func(p uint16) string {
		if name := services.Name(r.Proto, p); name != "" {
			return name
		}
		return portText(p)
	}
	r.Local, r.Remote = endpoint(r.LocalAddr, port(r.LocalPort)), endpoint(r.RemoteAddr, port(r.RemotePort))
}

func newRows(recs []conn.Record) []Row {
	rows := make([]Row, len(recs))
	for i, r := range recs {
		rows[i] = newRow(r)
	}
	return rows
}

// matches reports whether the row contains needle (already lower-cased) in
// its addresses, ports, PID, process name, cgroup or pod names.
func (r *Row) matches(needle string) bool {
	return needle == "" || strings.Contains(r.search, needle)
}

// perProcess sums rows by PID; the rows are already filtered, so the sums
// are of the connections the filter selected. A process's name, cgroup and
// pod are those of its first row.
func perProcess(rows []*Row) []Row {
	return sumBy(rows, func(r *Row) (uint32, bool) { return r.PID, true }, func(r *Row) Row {
		return Row{Record: conn.Record{PID: r.PID, Comm: r.Comm, Cgroup: r.Cgroup, Names: r.Names, Event: conn.Update}}
	})
}

// perHost sums rows by remote address, whatever the port, protocol or
// process. Sockets with no peer (listeners, unconnected UDP sockets before
// their first datagram) belong to no host and are left out.
func perHost(rows []*Row) []Row {
	return sumBy(rows, func(r *Row) (netip.Addr, bool) {
		a := r.RemoteAddr.Unmap()
		return a, a.IsValid() && !a.IsUnspecified()
	}, func(r *Row) Row {
		a := r.RemoteAddr.Unmap()
		return Row{Record: conn.Record{RemoteAddr: a, RemoteHost: r.RemoteHost, Event: conn.Update}, Remote: a.String()}
	})
}

// sumBy adds up the rows that share a key into one row each, started by
// first from the first of them; rows whose key is not ok are left out.
// RTT and read wait are the worst (highest) of the rows, because an average
// would hide the one slow peer (or the one socket its reader neglects) a
// person is looking for.
func sumBy[K comparable](rows []*Row, key func(*Row) (K, bool), first func(*Row) Row) []Row {
	index := make(map[K]int)
	var out []Row
	for _, r := range rows {
		k, ok := key(r)
		if !ok {
			continue
		}
		i, seen := index[k]
		if !seen {
			i = len(out)
			index[k] = i
			out = append(out, first(r))
		}
		p := &out[i]
		p.Conns += r.Conns
		p.BytesIn += r.BytesIn
		p.BytesOut += r.BytesOut
		p.PacketsIn += r.PacketsIn
		p.PacketsOut += r.PacketsOut
		p.RateIn += r.RateIn
		p.RateOut += r.RateOut
		p.Retrans += r.Retrans
		p.DropsIn += r.DropsIn
		p.RTTus = max(p.RTTus, r.RTTus)
		p.ReadWaitP99us = max(p.ReadWaitP99us, r.ReadWaitP99us)
	}
	return out
}

// summary is what the header says about a snapshot: open connections per
// TCP state (busiest first), UDP flows, total bandwidth and this refresh's
// arrivals and departures. It covers every record, whatever the `/` filter.
type summary struct {
	tcpStates   []stateCount
	tcp, udp    int
	in, out     float64
	fresh, gone int
}

type stateCount struct {
	state string
	n     int
}

func summarize(recs []conn.Record) summary {
	var s summary
	byState := make(map[string]int)
	for _, r := range recs {
		s.in += r.RateIn
		s.out += r.RateOut
		switch {
		case r.Event == conn.Closed:
			s.gone++
			continue
		case r.Event == conn.New:
			s.fresh++
		}
		if r.Proto == "udp" {
			s.udp++
		} else {
			s.tcp++
			byState[r.State]++
		}
	}
	for state, n := range byState {
		s.tcpStates = append(s.tcpStates, stateCount{state, n})
	}
	slices.SortFunc(s.tcpStates, func(a, b stateCount) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.state, b.state))
	})
	return s
}
