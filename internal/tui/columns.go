package tui

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"

	"github.com/stacktop/stacktop/internal/clierr"
)

// ColumnID is a column's stable name, the one --sort accepts.
type ColumnID string

// The columns. Names are part of the command line (--sort).
const (
	ColProto      ColumnID = "proto"
	ColLocal      ColumnID = "local"
	ColRemote     ColumnID = "remote"
	ColPID        ColumnID = "pid"
	ColProcess    ColumnID = "process"
	ColState      ColumnID = "state"
	ColRateIn     ColumnID = "rate-in"
	ColRateOut    ColumnID = "rate-out"
	ColRTT        ColumnID = "rtt"
	ColBytesIn    ColumnID = "bytes-in"
	ColBytesOut   ColumnID = "bytes-out"
	ColPacketsIn  ColumnID = "packets-in"
	ColPacketsOut ColumnID = "packets-out"
	ColRetrans    ColumnID = "retrans"
	ColCgroup     ColumnID = "cgroup"
	ColConns      ColumnID = "conns"
)

// cutMode says which end of a too-long cell gives way.
type cutMode int

const (
	cutEnd  cutMode = iota // names: the start is what people recognise
	cutHost                // endpoints: the port must survive, the host shrinks
	cutHead                // cgroup paths: the leaf (container, unit) is the informative part
)

// column describes how one column looks, sorts and yields when space is short.
type column struct {
	id    ColumnID
	title string
	key   string // sort key, "" when the column is only sortable from its header
	// minWidth is how narrow a text column may be squeezed (with an
	// ellipsis); numeric columns are never squeezed, only dropped.
	minWidth  int
	maxWidth  int
	right     bool // numbers align right
	cut       cutMode
	descFirst bool // numbers sort biggest first, names A to Z first
	text      func(*Row) string
	compare   func(a, b *Row) int // ascending order
}

func (c *column) squeezable() bool { return c.minWidth > 0 }

var columns = map[ColumnID]*column{
	ColProto:      {id: ColProto, title: "Proto", key: "P", text: func(r *Row) string { return r.Proto }, compare: by(func(r *Row) string { return r.Proto })},
	ColLocal:      {id: ColLocal, title: "Local", key: "a", minWidth: 15, maxWidth: 47, cut: cutHost, text: func(r *Row) string { return r.Local }, compare: byEndpoint(func(r *Row) (netip.Addr, uint16) { return r.LocalAddr, r.LocalPort })},
	ColRemote:     {id: ColRemote, title: "Remote", key: "A", minWidth: 15, maxWidth: 47, cut: cutHost, text: func(r *Row) string { return r.Remote }, compare: byEndpoint(func(r *Row) (netip.Addr, uint16) { return r.RemoteAddr, r.RemotePort })},
	ColPID:        {id: ColPID, title: "PID", key: "p", right: true, text: func(r *Row) string { return pidText(r.PID) }, compare: by(func(r *Row) uint32 { return r.PID })},
	ColProcess:    {id: ColProcess, title: "Process", key: "n", minWidth: 7, maxWidth: 16, text: func(r *Row) string { return r.Comm }, compare: by(func(r *Row) string { return r.Comm })},
	ColState:      {id: ColState, title: "State", key: "s", text: func(r *Row) string { return r.State }, compare: by(func(r *Row) string { return r.State })},
	ColRateIn:     {id: ColRateIn, title: "Rate In", key: "r", right: true, descFirst: true, text: func(r *Row) string { return humanRate(r.RateIn) }, compare: by(func(r *Row) float64 { return r.RateIn })},
	ColRateOut:    {id: ColRateOut, title: "Rate Out", key: "R", right: true, descFirst: true, text: func(r *Row) string { return humanRate(r.RateOut) }, compare: by(func(r *Row) float64 { return r.RateOut })},
	ColRTT:        {id: ColRTT, title: "RTT", key: "t", right: true, descFirst: true, text: func(r *Row) string { return humanRTT(r.RTTus) }, compare: by(func(r *Row) uint32 { return r.RTTus })},
	ColBytesIn:    {id: ColBytesIn, title: "Bytes In", right: true, descFirst: true, text: func(r *Row) string { return humanBytes(float64(r.BytesIn)) }, compare: by(func(r *Row) uint64 { return r.BytesIn })},
	ColBytesOut:   {id: ColBytesOut, title: "Bytes Out", right: true, descFirst: true, text: func(r *Row) string { return humanBytes(float64(r.BytesOut)) }, compare: by(func(r *Row) uint64 { return r.BytesOut })},
	ColPacketsIn:  {id: ColPacketsIn, title: "Pkts In", right: true, descFirst: true, text: func(r *Row) string { return countText(r.PacketsIn) }, compare: by(func(r *Row) uint64 { return r.PacketsIn })},
	ColPacketsOut: {id: ColPacketsOut, title: "Pkts Out", right: true, descFirst: true, text: func(r *Row) string { return countText(r.PacketsOut) }, compare: by(func(r *Row) uint64 { return r.PacketsOut })},
	ColRetrans:    {id: ColRetrans, title: "Retrans", right: true, descFirst: true, text: func(r *Row) string { return countText(uint64(r.Retrans)) }, compare: by(func(r *Row) uint32 { return r.Retrans })},
	ColCgroup:     {id: ColCgroup, title: "Cgroup", minWidth: 8, maxWidth: 60, cut: cutHead, text: func(r *Row) string { return r.Cgroup }, compare: by(func(r *Row) string { return r.Cgroup })},
	ColConns:      {id: ColConns, title: "Conns", right: true, descFirst: true, text: func(r *Row) string { return countText(uint64(r.Conns)) }, compare: by(func(r *Row) int { return r.Conns })},
}

func by[T cmp.Ordered](field func(*Row) T) func(a, b *Row) int {
	return func(a, b *Row) int { return cmp.Compare(field(a), field(b)) }
}

func byEndpoint(field func(*Row) (netip.Addr, uint16)) func(a, b *Row) int {
	return func(a, b *Row) int {
		aa, ap := field(a)
		ba, bp := field(b)
		return cmp.Or(aa.Unmap().Compare(ba.Unmap()), cmp.Compare(ap, bp))
	}
}

// view is one way of looking at the connections: its columns in screen
// order, and the order in which they are given up on a narrow terminal.
type view struct {
	name     string
	columns  []ColumnID // screen order
	extra    []ColumnID // shown after `c`, appended in this order
	priority []ColumnID // most important first; the rest drop from the end
	// tieBreak orders rows whose sort keys are equal, so equal rows never
	// swap places between refreshes or when the direction flips.
	tieBreak func(a, b *Row) int
}

var (
	connView = &view{
		name:     "connections",
		columns:  []ColumnID{ColProto, ColLocal, ColRemote, ColPID, ColProcess, ColState, ColRateIn, ColRateOut, ColRTT},
		extra:    []ColumnID{ColBytesIn, ColBytesOut, ColPacketsIn, ColPacketsOut, ColRetrans, ColCgroup},
		priority: []ColumnID{ColLocal, ColRemote, ColProcess, ColRateIn, ColRateOut, ColPID, ColState, ColRTT, ColBytesIn, ColBytesOut, ColRetrans, ColPacketsIn, ColPacketsOut, ColCgroup, ColProto},
		tieBreak: func(a, b *Row) int {
			return cmp.Or(cmp.Compare(a.Proto, b.Proto),
				columns[ColLocal].compare(a, b), columns[ColRemote].compare(a, b),
				cmp.Compare(a.PID, b.PID), cmp.Compare(a.Event, b.Event))
		},
	}
	processView = &view{
		name:     "processes",
		columns:  []ColumnID{ColPID, ColProcess, ColConns, ColBytesIn, ColBytesOut, ColRateIn, ColRateOut},
		extra:    []ColumnID{ColPacketsIn, ColPacketsOut, ColRetrans, ColRTT, ColCgroup},
		priority: []ColumnID{ColProcess, ColPID, ColRateIn, ColRateOut, ColConns, ColBytesIn, ColBytesOut, ColRetrans, ColRTT, ColPacketsIn, ColPacketsOut, ColCgroup},
		tieBreak: func(a, b *Row) int { return cmp.Compare(a.PID, b.PID) },
	}
)

func (v *view) has(id ColumnID) bool {
	for _, c := range v.visible(true) {
		if c == id {
			return true
		}
	}
	return false
}

func (v *view) visible(extra bool) []ColumnID {
	if !extra {
		return v.columns
	}
	return append(v.columns[:len(v.columns):len(v.columns)], v.extra...)
}

// Sort is an ordering of the table: a column and a direction.
type Sort struct {
	Column ColumnID
	Desc   bool
}

// DefaultSort puts the busiest receivers on top, like top puts the busiest
// CPU users on top.
var DefaultSort = Sort{Column: ColRateIn, Desc: true}

// sortableIDs lists every column name in screen order, for messages.
func sortableIDs() []string {
	var ids []string
	for _, id := range connView.visible(true) {
		ids = append(ids, string(id))
	}
	return append(ids, string(ColConns))
}

// ParseSort reads a --sort value: a column name (see SortColumns), optionally
// followed by ":asc" or ":desc"; without one, numbers sort biggest first and
// names A to Z.
func ParseSort(s string) (Sort, error) {
	name, dir, hasDir := strings.Cut(s, ":")
	c, ok := columns[ColumnID(strings.ToLower(name))]
	if !ok {
		return Sort{}, clierr.Usage("sort", s, "unknown column; one of %s (optionally :asc or :desc)", strings.Join(sortableIDs(), ", "))
	}
	srt := Sort{Column: c.id, Desc: c.descFirst}
	switch {
	case !hasDir:
	case dir == "asc":
		srt.Desc = false
	case dir == "desc":
		srt.Desc = true
	default:
		return Sort{}, clierr.Usage("sort", s, "direction must be asc or desc")
	}
	return srt, nil
}

// SortColumns is the help text for --sort.
func SortColumns() string {
	return fmt.Sprintf("initial sort column: %s; add :asc or :desc to choose the direction", strings.Join(sortableIDs(), ", "))
}
