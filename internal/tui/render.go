// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/termsafe"
)

// KeyHelp documents every key. The `?` overlay and `stacktop top --help`
// both show it, so the two never disagree.
const KeyHelp = `Sort    r rate in  R rate out  p PID  n process  s state  t RTT
        a local  A remote  P protocol  w read wait p99 (--read-wait)
        (the same key again flips)
        Tab Shift-Tab Left Right select a header, Enter sorts by it
Filter  / then type: matches address, host, port, process, PID, cgroup;
        Enter keeps the filter, Esc clears it
Scroll  Up Down  j k  PgUp PgDn  Home End
View    c  extra columns: bytes, packets, retransmits, cgroup
        g  next view: connections → processes → remote hosts
        L  stack latency over time (--latency)  N  port names/numbers
        Space pause (collection goes on)  ? help  q Ctrl-C quit
Marks   +  new    -  closed (final totals)    ~  partial (counted
        from start-up)    brighter rows move more bytes: idle,
        under 10KiB/s, under 1MiB/s, under 100MiB/s, more`

// Render draws the whole screen: exactly height lines, none wider than width.
func (m *Model) Render(t *Theme) string {
	lines := m.summary(t)
	var body []string
	if m.showLatency {
		lines = append(lines, m.latencyHeader(t))
		body = m.latencyBody(t, m.bodyHeight())
	} else {
		lines = append(lines, m.columnHeader(t))
		body = m.body(t)
	}
	if m.help {
		body = m.overlay(t, body)
	}
	lines = append(lines, body...)
	lines = append(lines, m.statusBar(t))
	if len(lines) > m.height {
		// Too short for everything: the status bar is what says how to
		// get help and quit, so it stays.
		lines = append(lines[:m.height-1], lines[len(lines)-1])
	}
	return strings.Join(lines, "\n")
}

func (m *Model) summary(t *Theme) []string {
	h := m.header
	left := fmt.Sprintf("stacktop · %s · kernel %s · %s backend · every %s", termsafe.String(h.Host), h.Kernel, h.Backend, h.Interval)
	right := "waiting for the first refresh"
	if m.received {
		right = m.snap.Time.Format("15:04:05")
	}
	var byState []string
	for _, s := range m.sum.tcpStates {
		byState = append(byState, fmt.Sprintf("%s %d", s.state, s.n))
	}
	counts := fmt.Sprintf("TCP %d", m.sum.tcp)
	if len(byState) > 0 {
		counts += " (" + strings.Join(byState, ", ") + ")"
	}
	counts += fmt.Sprintf("   UDP %d", m.sum.udp)
	lines := []string{
		m.spread(t.paint(t.title, ansi.Truncate(left, m.width-len(right)-1, ellipsis)), right),
		m.fitLine(counts),
		m.fitLine(fmt.Sprintf("In %s   Out %s   %d new, %d closed since the last refresh",
			humanRate(m.sum.in), humanRate(m.sum.out), m.sum.fresh, m.sum.gone)),
	}
	if m.headerLines() == 4 {
		lines = append(lines, t.paint(t.warn, m.fitLine(fmt.Sprintf(
			"lost events %d   map full %d   (counts since start; totals may be incomplete)", m.snap.Lost, m.snap.MapFull))))
	}
	return lines
}

// spread puts left and right on one line, right-aligned, if both fit.
func (m *Model) spread(left, right string) string {
	pad := m.width - ansi.StringWidth(left) - ansi.StringWidth(right)
	if pad < 1 {
		return m.fitLine(left)
	}
	return left + strings.Repeat(" ", pad) + right
}

func (m *Model) fitLine(s string) string { return ansi.Truncate(s, m.width, ellipsis) }

func (m *Model) columnHeader(t *Theme) string {
	s := m.sorts[m.view]
	var b strings.Builder
	b.WriteString(t.paint(t.header, strings.Repeat(" ", markerWidth)))
	used := markerWidth
	for i, c := range m.layout.cols {
		title := c.title
		style := t.header
		if c.id == s.Column {
			title += arrow(s.Desc)
			style = t.sorted
		}
		if c.id == m.cursor {
			style = t.selected
		}
		b.WriteString(t.paint(t.header, " "))
		b.WriteString(t.paint(style, cell(c, title, m.layout.widths[i])))
		used += gap + m.layout.widths[i]
	}
	if rest := m.width - used; rest > 0 && !t.plain {
		b.WriteString(t.paint(t.header, strings.Repeat(" ", rest)))
	}
	return b.String()
}

func (m *Model) body(t *Theme) []string {
	n := m.bodyHeight()
	lines := make([]string, 0, n)
	end := min(m.offset+n, len(m.shown))
	for _, r := range m.shown[m.offset:end] {
		lines = append(lines, t.paint(t.row(r), m.rowText(r)))
	}
	if len(m.shown) == 0 && n > 0 {
		lines = append(lines, m.fitLine("  "+m.emptyText()))
	}
	for len(lines) < n {
		lines = append(lines, "")
	}
	return lines
}

func (m *Model) emptyText() string {
	switch {
	case !m.received:
		return fmt.Sprintf("collecting: the first refresh comes after %s", m.header.Interval)
	case m.filter != "":
		return fmt.Sprintf("nothing matches %q (Esc clears the filter)", m.filter)
	default:
		return "no connections"
	}
}

func (m *Model) rowText(r *Row) string {
	var b strings.Builder
	b.WriteString(marker(r))
	for i, c := range m.layout.cols {
		b.WriteByte(' ')
		b.WriteString(cell(c, c.text(r), m.layout.widths[i]))
	}
	return b.String()
}

// arrow shows the sort direction: ▼ biggest (or Z) first, ▲ smallest first.
func arrow(desc bool) string {
	if desc {
		return "▼"
	}
	return "▲"
}

// marker is the two-character row prefix: the event, then partial.
func marker(r *Row) string {
	ev, part := byte(' '), byte(' ')
	switch r.Event {
	case conn.New:
		ev = '+'
	case conn.Closed:
		ev = '-'
	}
	if r.Partial {
		part = '~'
	}
	return string([]byte{ev, part})
}

// latencyHeader heads the latency view where the column header heads the table.
func (m *Model) latencyHeader(t *Theme) string {
	line := m.fitLine(fmt.Sprintf("  Stack latency: a column per refresh (every %s), newest at the right", m.header.Interval))
	if pad := m.width - ansi.StringWidth(line); pad > 0 && !t.plain {
		line += strings.Repeat(" ", pad)
	}
	return t.paint(t.header, line)
}

func (m *Model) statusBar(t *Theme) string {
	s := m.sorts[m.view]
	parts := []string{fmt.Sprintf("sort %s %s", columns[s.Column].title, arrow(s.Desc))}
	if m.showLatency {
		parts = []string{fmt.Sprintf("stack latency: %d refreshes", len(m.latency.refreshes))}
	}
	switch {
	case m.typing:
		parts = append(parts, fmt.Sprintf("filter: %s▏ (Enter keep, Esc clear)", m.filter))
	case m.filter != "":
		parts = append(parts, fmt.Sprintf("filter %q", m.filter))
	}
	if m.cursor != s.Column && !m.typing {
		parts = append(parts, "Enter: sort by "+columns[m.cursor].title)
	}
	if m.paused {
		parts = append(parts, fmt.Sprintf("PAUSED (%d %s waiting)", m.unseen, plural(m.unseen, "refresh", "refreshes")))
	}
	if m.hint != "" {
		parts = append(parts, m.hint)
	}
	parts = append(parts, fmt.Sprintf("%d %s", len(m.shown), m.view.name))
	if m.showLatency {
		parts[len(parts)-1] = "L back to the " + m.view.name
	}
	line := m.spread(" "+strings.Join(parts, " │ "), "? help  q quit ")
	if pad := m.width - ansi.StringWidth(line); pad > 0 && !t.plain {
		line += strings.Repeat(" ", pad)
	}
	return t.paint(t.status, line)
}

// overlay draws the help box centred over the (dimmed) table.
func (m *Model) overlay(t *Theme, body []string) []string {
	box := strings.Split(t.box.Render("Keys\n\n"+KeyHelp), "\n")
	boxWidth := 0
	for _, l := range box {
		boxWidth = max(boxWidth, ansi.StringWidth(l))
	}
	x := max((m.width-boxWidth)/2, 0)
	y := max((len(body)-len(box))/2, 0)
	out := make([]string, len(body))
	for i, line := range body {
		plain := ansi.Strip(line)
		j := i - y
		if j < 0 || j >= len(box) {
			out[i] = t.paint(t.backdrop, plain)
			continue
		}
		left := ansi.Truncate(plain, x, "")
		left += strings.Repeat(" ", x-ansi.StringWidth(left))
		right := ansi.TruncateLeft(plain, x+boxWidth, "")
		out[i] = m.fitLine(t.paint(t.backdrop, left) + box[j] + t.paint(t.backdrop, right))
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
