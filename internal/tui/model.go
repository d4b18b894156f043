// SPDX-License-Identifier: Apache-2.0

// Package tui is the interactive connection table of `stacktop top`: a pure
// Model (what is shown, in which order, in which columns, at which width)
// that tests drive key by key, and Run, which puts the Model on a terminal
// with Bubble Tea while a collector keeps taking snapshots.
package tui

import (
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/resolve"
)

// Header is what the summary header says about the host and the collector.
type Header struct {
	Host, Kernel, Backend string
	Interval              time.Duration
	ReadWait              bool // --read-wait: the read-wait column is shown
	Latency               bool // --latency: the stack latency view (`L`) has data
	Resolve               bool // --resolve: the Host column is shown
}

// Model is the state of the screen. Its methods are the only way to change
// it, each leaving the rows filtered, sorted and laid out for the terminal.
type Model struct {
	header Header

	snap     conn.Snapshot // on screen
	sum      summary       // of snap, for the header
	received bool          // a snapshot has arrived
	pending  prepared      // newest snapshot taken while paused
	unseen   int           // snapshots taken while paused
	rows     []Row         // one per record of snap
	grouped  []Row         // per-process or per-host sums backing shown in those views
	shown    []*Row        // rows on the table, filtered and sorted

	view   *view
	views  []*view // connections, processes, remote hosts (`g` cycles): with the read-wait column when it is on
	conns  *view   // views[0]
	sorts  map[*view]Sort
	extra  bool // `c`: extra columns
	paused bool
	help   bool
	typing bool // `/` was pressed: keys go to the filter
	filter string
	cursor ColumnID // header selected with Tab/arrows
	offset int      // first row on screen

	latency     latencyHistory
	latPending  [][]hist.Series // latency of refreshes taken while paused
	showLatency bool            // `L`: the latency view instead of the table
	latOffset   int             // first probe on screen in the latency view

	services  resolve.Services // port names (/etc/services)
	portNames bool             // `N`: endpoints show service names for ports

	width, height int
	content       map[ColumnID]width // widest and least cell per column, for the layout
	layout        layout
	hint          string // a one-key-press note in the status bar
}

// NewModel returns an empty screen sorted by s in each view that has its
// column, and by DefaultSort in the others (and when s is zero).
func NewModel(h Header, s Sort) *Model {
	m := &Model{header: h, views: []*view{connView, processView, hostView}, width: 80, height: 24, sorts: map[*view]Sort{}}
	if h.ReadWait {
		m.views = []*view{connViewRW, processViewRW, hostViewRW}
	}
	if h.Resolve { // the name beside the address it names
		m.views[0] = withColumn(m.views[0], ColHost, ColRemote, ColRemote)
		m.views[2] = withColumn(m.views[2], ColHost, ColRemote, ColRemote)
	}
	m.conns = m.views[0]
	m.view = m.conns
	for _, v := range m.views {
		m.sorts[v] = DefaultSort
		if v.has(s.Column) {
			m.sorts[v] = s
		}
	}
	m.cursor = m.sorts[m.conns].Column
	m.rebuild()
	return m
}

// Update takes a new snapshot. While paused it is kept aside (only the
// newest) and shown when the display resumes.
func (m *Model) Update(s conn.Snapshot) { m.take(prepare(s, nil)) }

// prepared is a snapshot with its rows built: the part of a refresh that
// does not depend on what is on screen, done off the UI goroutine by Run.
// latency is what each probe series recorded since the previous refresh.
type prepared struct {
	snap    conn.Snapshot
	rows    []Row
	sum     summary
	latency []hist.Series
}

func prepare(s conn.Snapshot, lat []hist.Series) prepared {
	return prepared{s, newRows(s.Records), summarize(s.Records), lat}
}

func (m *Model) take(p prepared) {
	if m.paused {
		m.pending = p
		m.latPending = append(m.latPending, p.latency)
		if n := len(m.latPending); n > maxHistory { // older ones would scroll off anyway
			m.latPending = slices.Delete(m.latPending, 0, n-maxHistory)
		}
		m.unseen++
		return
	}
	m.latency.add(p.latency)
	m.show(p)
}

func (m *Model) show(p prepared) {
	m.snap, m.sum = p.snap, p.sum
	m.received = true
	m.rows = p.rows
	if m.portNames {
		m.nameEndpoints()
	}
	m.rebuild()
}

// Resize lays the table out again for a terminal of w×h cells.
func (m *Model) Resize(w, h int) {
	m.width, m.height = max(w, 1), max(h, 1)
	m.relayout()
	m.scroll(0)
}

// sortKeys maps the single-key sorts to their columns.
var sortKeys = func() map[string]ColumnID {
	keys := make(map[string]ColumnID)
	for id, c := range columns {
		if c.key != "" {
			keys[c.key] = id
		}
	}
	return keys
}()

// Key applies one key press, named as Bubble Tea names keys ("q", "R",
// "shift+tab", "pgdown", "space"...), and reports whether to quit.
func (m *Model) Key(k string) (quit bool) {
	m.hint = ""
	if k == "ctrl+c" {
		return true
	}
	if m.typing {
		m.editFilter(k)
		return false
	}
	if m.help {
		m.help = false // any key closes the overlay; q still quits
		return k == "q"
	}
	page := max(m.bodyHeight()-1, 1)
	switch k {
	case "q":
		return true
	case "?":
		m.help = true
	case "/":
		m.typing = true
	case "esc":
		m.setFilter("")
	case "c":
		m.extra = !m.extra
		m.rebuild()
	case "g":
		m.nextView()
	case "N":
		m.portNames = !m.portNames
		m.nameEndpoints()
		m.rebuild()
	case "L":
		m.showLatency = !m.showLatency
		if !m.header.Latency {
			m.hint = "stack latency is off: start with --latency"
		}
	case "space":
		m.togglePause()
	case "tab", "right":
		m.moveCursor(1)
	case "shift+tab", "left":
		m.moveCursor(-1)
	case "enter":
		m.sortBy(m.cursor)
	case "up", "k":
		m.scroll(-1)
	case "down", "j":
		m.scroll(1)
	case "pgup":
		m.scroll(-page)
	case "pgdown":
		m.scroll(page)
	case "home":
		m.offset = 0
	case "end":
		m.scroll(len(m.shown))
	default:
		if id, ok := sortKeys[k]; ok {
			m.sortBy(id)
		}
	}
	return false
}

func (m *Model) editFilter(k string) {
	switch k {
	case "esc":
		m.typing = false
		m.setFilter("")
	case "enter":
		m.typing = false
	case "backspace":
		if f := m.filter; f != "" {
			_, n := utf8.DecodeLastRuneInString(f)
			m.setFilter(f[:len(f)-n])
		}
	case "ctrl+u":
		m.setFilter("")
	case "space":
		m.setFilter(m.filter + " ")
	default:
		if utf8.RuneCountInString(k) == 1 {
			m.setFilter(m.filter + k)
		}
	}
}

func (m *Model) setFilter(f string) {
	m.filter = f
	m.offset = 0
	m.rebuild()
}

func (m *Model) nextView() {
	i := slices.Index(m.views, m.view)
	m.view = m.views[(i+1)%len(m.views)]
	m.cursor = m.sorts[m.view].Column
	m.offset = 0
	m.rebuild()
}

// nameEndpoints renders every row's endpoints with service names for
// ports (`N`) or numbers.
func (m *Model) nameEndpoints() {
	services := m.services
	if !m.portNames {
		services = nil
	}
	for i := range m.rows {
		m.rows[i].setEndpoints(services)
	}
}

func (m *Model) togglePause() {
	m.paused = !m.paused
	if !m.paused && m.unseen > 0 {
		for _, lat := range m.latPending {
			m.latency.add(lat)
		}
		m.latPending = nil
		m.unseen = 0
		m.show(m.pending)
		m.pending = prepared{}
	}
}

// sortBy sorts by a column, flipping the direction when it is already the
// sort column.
func (m *Model) sortBy(id ColumnID) {
	c := columns[id]
	if id == ColReadWait && !m.header.ReadWait {
		m.hint = "read wait is off: start with --read-wait"
		return
	}
	if !m.view.has(id) {
		m.hint = "no " + c.title + " column in the " + m.view.name + " view"
		return
	}
	s := m.sorts[m.view]
	if s.Column == id {
		s.Desc = !s.Desc
	} else {
		s = Sort{Column: id, Desc: c.descFirst}
	}
	m.sorts[m.view] = s
	m.cursor = id
	m.resort()
}

func (m *Model) moveCursor(step int) {
	cols := m.layout.cols
	if len(cols) == 0 {
		return
	}
	i := slices.IndexFunc(cols, func(c *column) bool { return c.id == m.cursor })
	if i < 0 {
		i = 0
		if step < 0 {
			i = len(cols) - 1
		}
	} else {
		i = (i + step + len(cols)) % len(cols)
	}
	m.cursor = cols[i].id
}

// scroll moves the table by step rows, or in the latency view the probes
// by one per step.
func (m *Model) scroll(step int) {
	if m.showLatency {
		m.latOffset = max(min(m.latOffset+step, len(m.latency.names)-1), 0)
		return
	}
	m.offset = max(min(m.offset+step, len(m.shown)-m.bodyHeight()), 0)
}

// rebuild recomputes the table from the snapshot's rows: filter, group,
// measure, sort, lay out.
func (m *Model) rebuild() {
	needle := strings.ToLower(m.filter)
	m.shown = m.shown[:0]
	for i := range m.rows {
		if m.rows[i].matches(needle) {
			m.shown = append(m.shown, &m.rows[i])
		}
	}
	if m.view.group != nil {
		m.grouped = m.view.group(m.shown)
		m.shown = m.shown[:0]
		for i := range m.grouped {
			m.shown = append(m.shown, &m.grouped[i])
		}
	}
	m.content = make(map[ColumnID]width)
	for _, id := range m.view.visible(m.extra) {
		m.content[id] = columns[id].contentWidth(m.shown)
	}
	m.resort()
}

// resort orders the shown rows; the rows themselves, and so the widths of
// their cells, are unchanged.
func (m *Model) resort() {
	s := m.sorts[m.view]
	compare, tieBreak := columns[s.Column].compare, m.view.tieBreak
	slices.SortFunc(m.shown, func(a, b *Row) int {
		c := compare(a, b)
		if s.Desc {
			c = -c
		}
		if c != 0 {
			return c
		}
		return tieBreak(a, b)
	})
	m.relayout()
	m.scroll(0)
}

func (m *Model) relayout() {
	sorted := m.sorts[m.view].Column
	widths := make(map[ColumnID]width, len(m.content))
	for id, w := range m.content {
		widths[id] = columns[id].fitWidth(w, id == sorted)
	}
	m.layout = fit(m.view, m.view.visible(m.extra), widths, m.width, sorted)
}

// headerLines is the height of the summary header: a fourth line appears
// when events were lost or a map was full.
func (m *Model) headerLines() int {
	if m.snap.Lost > 0 || m.snap.MapFull > 0 {
		return 4
	}
	return 3
}

// bodyHeight is how many rows fit between the column header and the status bar.
func (m *Model) bodyHeight() int {
	return max(m.height-m.headerLines()-2, 0)
}
