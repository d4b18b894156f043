// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/termsafe"
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
	ColDropsIn    ColumnID = "drops-in"
	ColCgroup     ColumnID = "cgroup"
	ColPod        ColumnID = "pod"
	ColConns      ColumnID = "conns"
	ColReadWait   ColumnID = "read-wait" // p99 read wait; only with --read-wait
	ColHost       ColumnID = "host"      // the remote address's name; only with --resolve
)

// cutMode says which end of a too-long cell gives way.
type cutMode int

const (
	cutEnd  cutMode = iota // names: the start is what people recognise
	cutAddr                // addresses and endpoints: never cut; IPv6 gives up middle groups, the port stays
	cutHead                // cgroup paths: the leaf (container, unit) is the informative part
)

// column describes how one column looks, sorts and yields when space is short.
type column struct {
	id    ColumnID
	title string
	key   string // sort key, "" when the column is only sortable from its header
	// minWidth is how narrow a text column may be squeezed (with an
	// ellipsis); numeric columns are never squeezed, only dropped, and
	// address columns only as far as their least legible cell (addrWidth).
	minWidth  int
	maxWidth  int
	right     bool // numbers align right
	cut       cutMode
	descFirst bool // numbers sort biggest first, names A to Z first
	text      func(*Row) string
	compare   func(a, b *Row) int // ascending order
	// How wide the column's cells are, without formatting every row: a
	// bounded format (rates, sizes, RTT) has a fixed widest text; a counter
	// is as wide as its largest value; text columns measure each cell.
	fixed   int
	counter func(*Row) uint64
}

// width is how wide the cell with text would like to be, and how narrow it
// may become.
type width struct{ natural, least int }

func (c *column) cellWidth(text string) width {
	w := textWidth(text)
	switch {
	case c.cut == cutAddr:
		return width{w, addrWidth(text)}
	case c.minWidth > 0:
		return width{w, min(c.minWidth, w)}
	}
	return width{w, w}
}

// Widest texts of the bounded formats: "999B/s" < "1.23MiB/s", "12.4 ms".
const (
	rateWidth  = len("1.23MiB/s")
	bytesWidth = len("1.23MiB")
	rttWidth   = len("12.4 ms")
)

func textColumn(id ColumnID, title, key string, field func(*Row) string) *column {
	return &column{id: id, title: title, key: key, text: field, compare: by(field)}
}

func counterColumn[T uint32 | uint64 | int](id ColumnID, title, key string, field func(*Row) T) *column {
	count := func(r *Row) uint64 { return uint64(field(r)) }
	return &column{id: id, title: title, key: key, right: true, descFirst: true, counter: count,
		text: func(r *Row) string { return countText(count(r)) }, compare: by(field)}
}

func formattedColumn[T uint32 | uint64 | float64](id ColumnID, title, key string, width int, field func(*Row) T, format func(T) string) *column {
	return &column{id: id, title: title, key: key, right: true, descFirst: true, fixed: width,
		text: func(r *Row) string { return format(field(r)) }, compare: by(field)}
}

func with(c *column, f func(*column)) *column { f(c); return c }

// podText is "namespace/pod/container" ("-" for an unknown container), or
// "-" outside pods.
func podText(r *Row) string {
	if r.Pod == "" {
		return "-"
	}
	return termsafe.String(r.Namespace + "/" + r.Pod + "/" + orDash(r.Container))
}

var columns = func() map[ColumnID]*column {
	bytes := func(v uint64) string { return humanBytes(float64(v)) }
	local := func(r *Row) (netip.Addr, uint16) { return r.LocalAddr, r.LocalPort }
	remote := func(r *Row) (netip.Addr, uint16) { return r.RemoteAddr, r.RemotePort }
	all := []*column{
		textColumn(ColProto, "Proto", "P", func(r *Row) string { return r.Proto }),
		with(textColumn(ColLocal, "Local", "a", func(r *Row) string { return r.Local }), func(c *column) {
			c.maxWidth, c.cut, c.compare = 47, cutAddr, byEndpoint(local)
		}),
		with(textColumn(ColRemote, "Remote", "A", func(r *Row) string { return r.Remote }), func(c *column) {
			c.maxWidth, c.cut, c.compare = 47, cutAddr, byEndpoint(remote)
		}),
		with(counterColumn(ColPID, "PID", "p", func(r *Row) uint32 { return r.PID }), func(c *column) {
			c.descFirst, c.text = false, func(r *Row) string { return pidText(r.PID) }
		}),
		with(textColumn(ColProcess, "Process", "n", func(r *Row) string { return r.Comm }), func(c *column) {
			c.minWidth, c.maxWidth = 7, 16
			c.text = func(r *Row) string { return orDash(termsafe.String(r.Comm)) }
		}),
		textColumn(ColState, "State", "s", func(r *Row) string { return r.State }),
		formattedColumn(ColRateIn, "Rate In", "r", rateWidth, func(r *Row) float64 { return r.RateIn }, humanRate),
		formattedColumn(ColRateOut, "Rate Out", "R", rateWidth, func(r *Row) float64 { return r.RateOut }, humanRate),
		formattedColumn(ColRTT, "RTT", "t", rttWidth, func(r *Row) uint32 { return r.RTTus }, humanRTT),
		formattedColumn(ColBytesIn, "Bytes In", "", bytesWidth, func(r *Row) uint64 { return r.BytesIn }, bytes),
		formattedColumn(ColBytesOut, "Bytes Out", "", bytesWidth, func(r *Row) uint64 { return r.BytesOut }, bytes),
		counterColumn(ColPacketsIn, "Pkts In", "", func(r *Row) uint64 { return r.PacketsIn }),
		counterColumn(ColPacketsOut, "Pkts Out", "", func(r *Row) uint64 { return r.PacketsOut }),
		counterColumn(ColRetrans, "Retrans", "", func(r *Row) uint32 { return r.Retrans }),
		counterColumn(ColDropsIn, "Drops In", "", func(r *Row) uint64 { return r.DropsIn }),
		with(textColumn(ColCgroup, "Cgroup", "", func(r *Row) string { return r.Cgroup }), func(c *column) {
			c.minWidth, c.maxWidth, c.cut = 8, 60, cutHead
			c.text = func(r *Row) string { return orDash(termsafe.String(r.Cgroup)) }
		}),
		with(textColumn(ColPod, "Pod", "", podText), func(c *column) { c.minWidth, c.maxWidth = 8, 60 }),
		counterColumn(ColConns, "Conns", "", func(r *Row) int { return r.Conns }),
		formattedColumn(ColReadWait, "Wait p99", "w", rttWidth, func(r *Row) uint64 { return r.ReadWaitP99us }, humanWait),
		with(textColumn(ColHost, "Host", "", func(r *Row) string { return r.RemoteHost }), func(c *column) {
			c.minWidth, c.maxWidth = 8, 40
			c.text = func(r *Row) string { return orDash(termsafe.String(r.RemoteHost)) }
		}),
	}
	byID := make(map[ColumnID]*column, len(all))
	for _, c := range all {
		byID[c.id] = c
	}
	return byID
}()

// contentWidth is the width of the column's widest cell among rows, and
// the least width that still shows every cell legibly.
func (c *column) contentWidth(rows []*Row) width {
	switch {
	case c.fixed > 0:
		return width{c.fixed, c.fixed}
	case c.counter != nil:
		var most uint64
		for _, r := range rows {
			most = max(most, c.counter(r))
		}
		n := len(countText(most))
		return width{n, n}
	}
	var w width
	for _, r := range rows {
		cw := c.cellWidth(c.text(r))
		w.natural, w.least = max(w.natural, cw.natural), max(w.least, cw.least)
	}
	return w
}

// fitWidth is the width the column would like: its widest cell or its
// title (with the sort arrow when sorted), within its maximum; and the
// least it can be given.
func (c *column) fitWidth(content width, sorted bool) width {
	title := textWidth(c.title)
	if sorted {
		title++
	}
	w := max(content.natural, title)
	if c.maxWidth > 0 {
		w = min(w, c.maxWidth)
	}
	if !c.squeezable() {
		return width{w, w}
	}
	return width{w, min(content.least, w)}
}

func (c *column) squeezable() bool { return c.minWidth > 0 || c.cut == cutAddr }

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
	// group sums the (filtered) connections into this view's rows; nil
	// shows each connection.
	group func([]*Row) []Row
}

var (
	connView = &view{
		name:     "connections",
		columns:  []ColumnID{ColProto, ColLocal, ColRemote, ColPID, ColProcess, ColState, ColRateIn, ColRateOut, ColRTT},
		extra:    []ColumnID{ColBytesIn, ColBytesOut, ColPacketsIn, ColPacketsOut, ColRetrans, ColDropsIn, ColPod, ColCgroup},
		priority: []ColumnID{ColRemote, ColLocal, ColProcess, ColRateIn, ColRateOut, ColRTT, ColPID, ColState, ColBytesIn, ColBytesOut, ColRetrans, ColPacketsIn, ColPacketsOut, ColDropsIn, ColPod, ColCgroup, ColProto},
		tieBreak: func(a, b *Row) int {
			return cmp.Or(cmp.Compare(a.Proto, b.Proto),
				columns[ColLocal].compare(a, b), columns[ColRemote].compare(a, b),
				cmp.Compare(a.PID, b.PID), cmp.Compare(a.Event, b.Event))
		},
	}
	processView = &view{
		name:     "processes",
		columns:  []ColumnID{ColPID, ColProcess, ColConns, ColBytesIn, ColBytesOut, ColRateIn, ColRateOut},
		extra:    []ColumnID{ColPacketsIn, ColPacketsOut, ColRetrans, ColDropsIn, ColRTT, ColPod, ColCgroup},
		priority: []ColumnID{ColProcess, ColPID, ColRateIn, ColRateOut, ColConns, ColBytesIn, ColBytesOut, ColRetrans, ColRTT, ColPacketsIn, ColPacketsOut, ColDropsIn, ColPod, ColCgroup},
		tieBreak: func(a, b *Row) int { return cmp.Compare(a.PID, b.PID) },
		group:    perProcess,
	}
	hostView = &view{
		name:     "remote hosts",
		columns:  []ColumnID{ColRemote, ColConns, ColBytesIn, ColBytesOut, ColRateIn, ColRateOut, ColRTT},
		extra:    []ColumnID{ColPacketsIn, ColPacketsOut, ColRetrans, ColDropsIn},
		priority: []ColumnID{ColRemote, ColRateIn, ColRateOut, ColConns, ColRTT, ColBytesIn, ColBytesOut, ColRetrans, ColPacketsIn, ColPacketsOut, ColDropsIn},
		tieBreak: func(a, b *Row) int { return a.RemoteAddr.Compare(b.RemoteAddr) },
		group:    perHost,
	}
)

// Read wait on (--read-wait), the views show each connection's p99 read
// wait after its RTT, each process's worst beside its rates, and each
// remote host's worst after its RTT.
var (
	connViewRW    = withColumn(connView, ColReadWait, ColRTT, ColRTT)
	processViewRW = withColumn(processView, ColReadWait, ColRateOut, ColConns)
	hostViewRW    = withColumn(hostView, ColReadWait, ColRTT, ColRTT)
)

// withColumn is v with column id after screen column `after` and priority
// column `rank`.
func withColumn(v *view, id, after, rank ColumnID) *view {
	w := *v
	insert := func(ids []ColumnID, at ColumnID) []ColumnID {
		i := slices.Index(ids, at) + 1
		return slices.Insert(slices.Clone(ids), i, id)
	}
	w.columns, w.priority = insert(v.columns, after), insert(v.priority, rank)
	return &w
}

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

// SortKeys lists every column name --sort takes, in screen order.
func SortKeys() []string {
	var ids []string
	for _, id := range connView.visible(true) {
		ids = append(ids, string(id))
	}
	return append(ids, string(ColConns), string(ColReadWait), string(ColHost))
}

// ParseSort reads a --sort value: a column name (see SortColumns), optionally
// followed by ":asc" or ":desc"; without one, numbers sort biggest first and
// names A to Z.
func ParseSort(s string) (Sort, error) {
	name, dir, hasDir := strings.Cut(s, ":")
	c, ok := columns[ColumnID(strings.ToLower(name))]
	if !ok {
		return Sort{}, clierr.Usage("sort", s, "unknown column; one of %s (optionally :asc or :desc)", strings.Join(SortKeys(), ", "))
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
	return fmt.Sprintf("initial sort column: %s; add :asc or :desc to choose the direction", strings.Join(SortKeys(), ", "))
}
