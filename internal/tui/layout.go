// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"
)

const (
	markerWidth = 2 // "+~": event marker, then the partial marker
	gap         = 1 // space between columns
	ellipsis    = "…"
)

// layout is the set of columns that fit the terminal, in screen order, with
// the width each one gets.
type layout struct {
	cols   []*column
	widths []int
}

// fit chooses columns and widths for a terminal width. widths holds each
// candidate's natural width (widest cell, title included) and least width.
// Columns are taken in priority order, the sorted column first so the order
// on screen is always explained; each needs its least width. Space left
// over then goes, a cell at a time and round-robin, to squeezed columns
// until they reach their natural width.
func fit(v *view, ids []ColumnID, widths map[ColumnID]width, termWidth int, sorted ColumnID) layout {
	order := slices.Clone(v.priority)
	if i := slices.Index(order, sorted); i > 0 {
		order = slices.Insert(slices.Delete(order, i, i+1), 0, sorted)
	}
	minOf := func(c *column) int { return widths[c.id].least }
	used := markerWidth
	taken := make(map[ColumnID]bool)
	for _, id := range order {
		if !slices.Contains(ids, id) {
			continue
		}
		if need := gap + minOf(columns[id]); used+need <= termWidth {
			used += need
			taken[id] = true
		}
	}
	var l layout
	for _, id := range ids {
		if taken[id] {
			l.cols = append(l.cols, columns[id])
			l.widths = append(l.widths, minOf(columns[id]))
		}
	}
	for spare := termWidth - used; spare > 0; {
		grew := false
		for i, c := range l.cols {
			if spare > 0 && l.widths[i] < widths[c.id].natural {
				l.widths[i]++
				spare--
				grew = true
			}
		}
		if !grew {
			break
		}
	}
	return l
}

// textWidth is the number of terminal cells s takes. Nearly every cell is
// ASCII (addresses, numbers, most process names), where that is its length;
// measuring grapheme clusters for all of them would dominate a refresh.
func textWidth(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return ansi.StringWidth(s)
		}
	}
	return len(s)
}

// cell fits text into width cells: cut the way the column wants, then pad.
func cell(c *column, text string, width int) string {
	if textWidth(text) > width {
		text = shorten(text, width, c.cut)
	}
	pad := width - textWidth(text)
	if pad <= 0 {
		return text
	}
	if c.right {
		return strings.Repeat(" ", pad) + text
	}
	return text + strings.Repeat(" ", pad)
}

// shorten cuts s to width cells, marking the cut with an ellipsis.
func shorten(s string, width int, mode cutMode) string {
	if width <= 0 {
		return ""
	}
	w := ansi.StringWidth(s)
	if w <= width {
		return s
	}
	switch mode {
	case cutHead:
		return ansi.TruncateLeft(s, w-width+1, ellipsis)
	case cutAddr:
		if a, ok := abbreviateAddr(s, width); ok {
			return a
		}
	}
	return ansi.Truncate(s, width, ellipsis)
}
