// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"fmt"
	"slices"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/latency"
)

// The latency view (`L`, with --latency) draws each probe's stack latency
// over the last refreshes as a heatmap: one column per refresh, newest at
// the right, one row per log2 bucket, slowest at the top; a cell's shade is
// the share of that refresh's samples in that bucket. A tail that appears
// shows as marks climbing in the newest columns, which no cumulative
// histogram shows.

// maxHistory is how many refreshes the view keeps: five minutes at the
// default interval, wider than any terminal.
const maxHistory = 300

// heatLevels are the shades, from "no sample" up; heatShare their upper
// bounds as a share of the refresh's samples (the last has none).
var (
	heatLevels = []string{" ", "·", "░", "▒", "▓", "█"}
	heatShare  = []float64{0, 0.01, 0.10, 0.30, 0.60}
)

const heatLegend = "· <1%  ░ <10%  ▒ <30%  ▓ <60%  █ ≥60% of the refresh's samples"

// latencyHistory holds the per-refresh histograms of every probe series.
type latencyHistory struct {
	names     []string                    // series in the order first seen
	refreshes []map[string]hist.Histogram // oldest first, at most maxHistory
}

// add appends one refresh: what each series recorded since the previous one.
func (h *latencyHistory) add(series []hist.Series) {
	r := make(map[string]hist.Histogram, len(series))
	for _, s := range series {
		name := latency.SeriesName(s)
		if !slices.Contains(h.names, name) {
			h.names = append(h.names, name)
		}
		r[name] = s.Hist
	}
	h.refreshes = append(h.refreshes, r)
	if n := len(h.refreshes); n > maxHistory {
		h.refreshes = slices.Delete(h.refreshes, 0, n-maxHistory)
	}
}

// heatLevel grades a bucket's share of its refresh: any sample at all is
// at least the first mark, so a single slow packet is never invisible.
func heatLevel(count, total uint64) int {
	if count == 0 {
		return 0
	}
	share := float64(count) / float64(total)
	for i, bound := range heatShare[1:] {
		if share < bound {
			return i + 1
		}
	}
	return len(heatLevels) - 1
}

// latencyLines draws the latency view's body in exactly n lines of width
// cells: one block per probe series (from the offset-th), then the legend.
func (m *Model) latencyLines(t *Theme, n, width int) []string {
	if n <= 0 {
		return nil
	}
	var lines []string
	h := &m.latency
	switch {
	case !m.header.Latency:
		lines = append(lines, "  stack latency is off: start with --latency (and --latency.probes for more probes)")
	case len(h.names) == 0:
		lines = append(lines, "  no samples yet: the probes count received packets as they are read")
	}
	names := h.names[min(m.latOffset, len(h.names)):]
	blocks, per := fitBlocks(len(names), n-1) // n-1: the legend
	scrolled := blocks < len(names) || m.latOffset > 0
	if scrolled {
		blocks, per = fitBlocks(len(names), n-2) // and the line saying which probes are shown
	}
	for _, name := range names[:blocks] {
		lines = append(lines, m.heatmap(t, name, per, width)...)
	}
	if scrolled {
		lines = append(lines, fmt.Sprintf("  probes %d–%d of %d: ↑↓ scroll", m.latOffset+1, m.latOffset+blocks, len(h.names)))
	}
	for len(lines) < n-1 {
		lines = append(lines, "")
	}
	lines = append(lines[:min(len(lines), n-1)], "  "+heatLegend)
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, width, ellipsis)
	}
	return lines
}

// minBlockLines is a probe's least block: its title and two bucket rows.
const minBlockLines = 3

// fitBlocks is how many of n probe blocks fit in avail lines with at least
// minBlockLines each (always one), and how many lines each gets.
func fitBlocks(n, avail int) (blocks, per int) {
	blocks = n
	for blocks > 1 && avail/blocks < minBlockLines {
		blocks--
	}
	if blocks == 0 {
		return 0, 0
	}
	return blocks, avail / blocks
}

// labelWidth fits a bucket label, "≤16.8ms" or ">8.59s", right-aligned.
const labelWidth = 8

// heatmap draws one series in at most lines lines: a title with the
// newest refresh's count and quantiles, then one row per bucket from the
// highest with a sample on screen down to the lowest. When they do not all
// fit, each row holds as many adjacent buckets as it takes, evenly, so the
// shape stays true; a row's label is the upper bound of its highest bucket.
func (m *Model) heatmap(t *Theme, name string, lines, width int) []string {
	h := &m.latency
	cols := max(width-labelWidth-2, 1)
	shown := h.refreshes[max(len(h.refreshes)-cols, 0):]
	newest := shown[len(shown)-1][name]
	title := fmt.Sprintf("%s   last refresh: %d   p50 %s   p99 %s   max %s", name, newest.Count(),
		latency.SlotText(newest.QuantileSlot(0.5)), latency.SlotText(newest.QuantileSlot(0.99)), latency.SlotText(newest.QuantileSlot(1)))
	out := []string{t.paint(t.title, title)}
	lo, hi := hist.MaxSlot, -1
	for _, r := range shown {
		hr := r[name]
		if s := hr.QuantileSlot(1); s > hi {
			hi = s
		}
		for i, c := range hr.Buckets {
			if c > 0 {
				lo = min(lo, i)
				break
			}
		}
	}
	if hi < 0 {
		return append(out, "  no samples in these refreshes")
	}
	span := hi - lo + 1
	perRow := (span + max(lines-1, 1) - 1) / max(lines-1, 1) // buckets per row
	for top := hi; top >= lo; top -= perRow {
		bottom := max(top-perRow+1, lo)
		var b strings.Builder
		fmt.Fprintf(&b, "%*s │", labelWidth, latency.SlotText(top))
		b.WriteString(strings.Repeat(" ", cols-len(shown)))
		for _, r := range shown {
			hr := r[name]
			var c uint64
			for s := bottom; s <= top; s++ {
				c += hr.Buckets[s]
			}
			level := heatLevel(c, hr.Count())
			b.WriteString(t.paint(t.heat[level], heatLevels[level]))
		}
		out = append(out, b.String())
	}
	return out
}

// latencyBody is the latency view in n lines: the heatmaps, and with
// --read-wait the slowest readers beside them (below on a narrow terminal).
func (m *Model) latencyBody(t *Theme, n int) []string {
	if !m.header.ReadWait {
		return m.latencyLines(t, n, m.width)
	}
	if m.width >= 100 {
		const pane = 42
		left := m.latencyLines(t, n, m.width-pane-1)
		right := m.readWaitLines(n, pane)
		for i := range left {
			pad := m.width - pane - ansi.StringWidth(left[i])
			if i < len(right) {
				left[i] += strings.Repeat(" ", pad) + right[i]
			}
		}
		return left
	}
	below := m.readWaitLines(min(6, n/3), m.width)
	return append(m.latencyLines(t, n-len(below), m.width), below...)
}

// readWaitLines lists the connections whose received data waited longest
// (p99 read wait of the last refresh), worst first: at most n lines of
// width cells, the remote endpoint abbreviated as the table does.
func (m *Model) readWaitLines(n, width int) []string {
	if n <= 0 {
		return nil
	}
	worst := make([]*Row, 0, len(m.rows))
	for i := range m.rows {
		if m.rows[i].ReadWaitP99us > 0 {
			worst = append(worst, &m.rows[i])
		}
	}
	slices.SortFunc(worst, func(a, b *Row) int {
		return -columns[ColReadWait].compare(a, b)
	})
	lines := []string{"Slowest readers (Wait p99)"}
	if len(worst) == 0 {
		lines = append(lines, "  no reads in the last refresh")
	}
	for _, r := range worst[:min(len(worst), n-1)] {
		process, remote := columns[ColProcess], columns[ColRemote]
		const waitAndProcess = 7 + 1 + 12 + 1
		lines = append(lines, fmt.Sprintf("%7s %s %s", humanWait(r.ReadWaitP99us), cell(process, process.text(r), 12),
			shorten(r.Remote, width-waitAndProcess, remote.cut)))
	}
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, width, ellipsis)
	}
	return lines
}
