// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"cmp"
	"slices"
	"strings"

	"github.com/stacktop/stacktop/internal/conn"
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
	row := Row{Record: r, Local: endpoint(r.LocalAddr, r.LocalPort), Remote: endpoint(r.RemoteAddr, r.RemotePort)}
	if r.Event != conn.Closed {
		row.Conns = 1
	}
	row.search = strings.ToLower(strings.Join([]string{
		row.Local, row.Remote, r.LocalAddr.Unmap().String(), r.RemoteAddr.Unmap().String(),
		pidText(r.PID), r.Comm, r.Cgroup, r.Namespace, r.Pod, r.Container,
	}, " "))
	return row
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
// are of the connections the filter selected. A process's name, cgroup and pod are those of its
// first row; RTT and read wait are the worst (highest) of its connections,
// because an average would hide the one slow peer (or the one socket its
// reader neglects) a person is looking for.
func perProcess(rows []*Row) []Row {
	byPID := make(map[uint32]int)
	var out []Row
	for _, r := range rows {
		i, ok := byPID[r.PID]
		if !ok {
			i = len(out)
			byPID[r.PID] = i
			out = append(out, Row{Record: conn.Record{PID: r.PID, Comm: r.Comm, Cgroup: r.Cgroup, Names: r.Names, Event: conn.Update}})
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
