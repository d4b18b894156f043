// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"charm.land/lipgloss/v2"

	"github.com/stacktop/stacktop/internal/conn"
)

// Theme is how the screen is painted. Everything the colours say is also
// said in text (markers, arrows, the status bar), so the plain theme and
// terminals without colour lose nothing but emphasis.
type Theme struct {
	plain     bool
	title     lipgloss.Style
	warn      lipgloss.Style
	header    lipgloss.Style // column header line
	sorted    lipgloss.Style // the sort column's header
	selected  lipgloss.Style // the header chosen with Tab/arrows
	status    lipgloss.Style
	bandwidth []lipgloss.Style // dim to bright, see bandwidthLevel
	fresh     lipgloss.Style   // new connections
	closed    lipgloss.Style
	backdrop  lipgloss.Style   // the table behind the help overlay
	box       lipgloss.Style   // help overlay
	heat      []lipgloss.Style // latency heatmap, by heatLevel
}

// ColorTheme is the terminal theme. Bubble Tea reduces it to what the
// terminal supports: 256 colours, 16, or none for NO_COLOR and dumb terminals.
func ColorTheme() *Theme {
	grey := func(c string) lipgloss.Style { return lipgloss.NewStyle().Foreground(lipgloss.Color(c)) }
	return &Theme{
		title:     lipgloss.NewStyle().Bold(true),
		warn:      lipgloss.NewStyle().Foreground(lipgloss.Color("9")).Bold(true),
		header:    lipgloss.NewStyle().Reverse(true),
		sorted:    lipgloss.NewStyle().Reverse(true).Bold(true),
		selected:  lipgloss.NewStyle().Background(lipgloss.Color("4")).Foreground(lipgloss.Color("15")).Bold(true),
		status:    lipgloss.NewStyle().Reverse(true),
		bandwidth: []lipgloss.Style{grey("240"), grey("245"), grey("250"), grey("255"), grey("15").Bold(true)},
		fresh:     lipgloss.NewStyle().Foreground(lipgloss.Color("10")).Bold(true),
		closed:    grey("240").Faint(true),
		backdrop:  lipgloss.NewStyle().Faint(true),
		box:       lipgloss.NewStyle().Border(lipgloss.RoundedBorder()).BorderForeground(lipgloss.Color("4")).Padding(0, 1),
		// The terminal's own palette (blue, cyan, green, yellow, red), so the
		// heatmap follows the user's colour scheme.
		heat: []lipgloss.Style{{}, grey("4"), grey("6"), grey("2"), grey("3"), grey("1").Bold(true)},
	}
}

// PlainTheme paints nothing: golden files and pipes see the text alone.
func PlainTheme() *Theme {
	return &Theme{plain: true, bandwidth: make([]lipgloss.Style, 5), heat: make([]lipgloss.Style, len(heatLevels)), box: lipgloss.NewStyle().Border(lipgloss.RoundedBorder()).Padding(0, 1)}
}

func (t *Theme) paint(s lipgloss.Style, text string) string {
	if t.plain {
		return text
	}
	return s.Render(text)
}

// bandwidthLevel grades in+out bandwidth on a log scale with fixed
// thresholds (idle, <10KiB/s, <1MiB/s, <100MiB/s, more), so a row's
// brightness means the same thing from one refresh to the next.
func bandwidthLevel(bytesPerSec float64) int {
	switch {
	case bytesPerSec < 1:
		return 0
	case bytesPerSec < 10<<10:
		return 1
	case bytesPerSec < 1<<20:
		return 2
	case bytesPerSec < 100<<20:
		return 3
	default:
		return 4
	}
}

func (t *Theme) row(r *Row) lipgloss.Style {
	switch r.Event {
	case conn.New:
		return t.fresh
	case conn.Closed:
		return t.closed
	}
	return t.bandwidth[bandwidthLevel(r.RateIn+r.RateOut)]
}
