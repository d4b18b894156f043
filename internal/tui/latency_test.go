// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/stacktop/stacktop/internal/hist"
)

var latencyHeader = func() Header { h := fixtureHeader; h.Latency = true; return h }()

// latencyRefresh is one refresh of two probes: tcp-socket-read reads 200
// packets around 100 µs (bucket 17, ≤131us), and from refresh tail on one
// of them waits 50 ms (bucket 26, ≤67.1ms); udp-start sees 40 at ≤2.05us.
func latencyRefresh(i, tail int) []hist.Series {
	var read, udp hist.Histogram
	read.Buckets[17] = 200
	if i >= tail {
		read.Buckets[17], read.Buckets[26] = 199, 1
	}
	udp.Buckets[11] = 40
	return []hist.Series{{Hook: "tcp-socket-read", Hist: read}, {Hook: "udp-start", Hist: udp}}
}

func newLatencyModel(t *testing.T, h Header, w, ht, refreshes, tail int) *Model {
	t.Helper()
	m := NewModel(h, Sort{})
	m.Resize(w, ht)
	for i := range refreshes {
		m.take(prepare(fixture(), latencyRefresh(i, tail)))
	}
	return m
}

// heatRow is the line of the latency view whose label is label, within
// the block of probe (the first such line after the probe's title).
func heatRow(t *testing.T, screen, probe, label string) string {
	t.Helper()
	row, ok := heatRowIfAny(screen, probe, label)
	if !ok {
		t.Fatalf("no %s row in the %s block:\n%s", label, probe, screen)
	}
	return row
}

// heatRowIfAny is heatRow, reporting whether the block has that row.
func heatRowIfAny(screen, probe, label string) (string, bool) {
	lines := strings.Split(screen, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, probe+"   last refresh") })
	if start < 0 {
		return "", false
	}
	for _, l := range lines[start+1:] {
		if !strings.Contains(l, " │") {
			break // the block ends
		}
		if strings.HasPrefix(strings.TrimLeft(l, " "), label+" │") {
			return l[strings.Index(l, "│")+len("│"):], true
		}
	}
	return "", false
}

// TestLatencyViewShowsTheTailMove: L switches to the heatmaps; at each
// size the tail bucket is empty in the refreshes before the tail appeared
// and marked in every one after it, the body bucket is full (█) in all,
// the title gives the last refresh's count and quantiles, and L returns
// to the table.
func TestLatencyViewShowsTheTailMove(t *testing.T) {
	const refreshes, tail = 12, 8
	for _, size := range [][2]int{{80, 24}, {100, 30}, {200, 50}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			m := newLatencyModel(t, latencyHeader, size[0], size[1], refreshes, tail)
			press(m, "L")
			screen := m.Render(PlainTheme())
			checkScreen(t, screen, size[0], size[1])
			if !strings.Contains(screen, "tcp-socket-read   last refresh: 200   p50 ≤131us   p99 ≤131us   max ≤67.1ms") {
				t.Errorf("title of the newest refresh missing:\n%s", screen)
			}
			tailRow := heatRow(t, screen, "tcp-socket-read", "≤67.1ms")
			cells := []rune(tailRow)
			recent := string(cells[len(cells)-refreshes:])
			if want := strings.Repeat(" ", tail) + strings.Repeat("·", refreshes-tail); recent != want {
				t.Errorf("tail row's last %d refreshes %q, want %q", refreshes, recent, want)
			}
			// At 80×24 the block has 8 rows for the 10 buckets from the
			// body to the tail: each row holds two, the lowest ≤131us and
			// ≤262us.
			bodyLabel := "≤131us"
			if size[0] == 80 {
				bodyLabel = "≤262us"
			}
			if body := heatRow(t, screen, "tcp-socket-read", bodyLabel); !strings.HasSuffix(body, strings.Repeat("█", refreshes)) {
				t.Errorf("body row %q: want every refresh full", body)
			}
			if row := heatRow(t, screen, "udp-start", "≤2.05us"); !strings.HasSuffix(row, strings.Repeat("█", refreshes)) {
				t.Errorf("udp-start row %q", row)
			}
			if !strings.Contains(screen, heatLegend) || !strings.Contains(screen, "L back to the connections") {
				t.Errorf("legend or status bar missing:\n%s", screen)
			}
			press(m, "L")
			if strings.Contains(m.Render(PlainTheme()), "Stack latency of received packets") {
				t.Errorf("L again must return to the table")
			}
		})
	}
}

// TestLatencyViewPausedKeepsEveryRefresh: refreshes taken while paused
// reach the heatmap when the display resumes, without a gap.
func TestLatencyViewPausedKeepsEveryRefresh(t *testing.T) {
	m := newLatencyModel(t, latencyHeader, 100, 30, 3, 100)
	press(m, "L", "space")
	for i := range 4 {
		m.take(prepare(fixture(), latencyRefresh(3+i, 5)))
	}
	if got := len(m.latency.refreshes); got != 3 {
		t.Fatalf("paused: %d refreshes on screen, want 3", got)
	}
	press(m, "space")
	screen := m.Render(PlainTheme())
	if row := heatRow(t, screen, "tcp-socket-read", "≤67.1ms"); !strings.HasSuffix(row, "  ··") {
		t.Errorf("after resume the tail row ends %q, want the two paused refreshes with the tail", row)
	}
	if len(m.latency.refreshes) != 7 {
		t.Errorf("%d refreshes after resume, want 7", len(m.latency.refreshes))
	}
}

// TestLatencyViewScrollsProbes: seven probes at 80×24 do not fit with
// room for their buckets: the view shows as many as fit, says which, and
// ↓ scrolls.
func TestLatencyViewScrollsProbes(t *testing.T) {
	m := NewModel(latencyHeader, Sort{})
	m.Resize(80, 24)
	hooks := []string{"ip-start", "tcp-start", "udp-start", "tcp-socket-enqueued", "udp-socket-enqueued", "tcp-socket-read", "udp-socket-read"}
	for range 3 {
		var series []hist.Series
		for i, h := range hooks {
			var hg hist.Histogram
			hg.Buckets[10+i], hg.Buckets[20+i] = 10, 1
			series = append(series, hist.Series{Hook: h, Hist: hg})
		}
		m.take(prepare(fixture(), series))
	}
	press(m, "L")
	screen := m.Render(PlainTheme())
	checkScreen(t, screen, 80, 24)
	if !strings.Contains(screen, "probes 1–") || strings.Contains(screen, "udp-socket-read   last") {
		t.Fatalf("seven probes at 80×24:\n%s", screen)
	}
	press(m, "down", "down", "down", "down", "down", "down")
	screen = m.Render(PlainTheme())
	if !strings.Contains(screen, "udp-socket-read   last") || !strings.Contains(screen, "probes 7–7 of 7") {
		t.Fatalf("scrolled to the last probe:\n%s", screen)
	}
}

// TestLatencyViewOffSaysHow: without --latency, L says how to turn it on.
func TestLatencyViewOffSaysHow(t *testing.T) {
	m := newFixtureModel(t, 100, 20)
	press(m, "L")
	screen := m.Render(PlainTheme())
	if !strings.Contains(screen, "stack latency is off: start with --latency") {
		t.Fatalf("L without --latency:\n%s", screen)
	}
	checkScreen(t, screen, 100, 20)
}

// TestLatencyViewWithReadWait: with --read-wait the slowest readers are
// listed beside the heatmaps on a wide terminal and below on 80 columns,
// worst first.
func TestLatencyViewWithReadWait(t *testing.T) {
	h := latencyHeader
	h.ReadWait = true
	for _, w := range []int{80, 120} {
		m := newLatencyModel(t, h, w, 30, 5, 3)
		press(m, "L")
		screen := m.Render(PlainTheme())
		checkScreen(t, screen, w, 30)
		lines := strings.Split(ansi.Strip(screen), "\n")
		at := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "Slowest readers (Wait p99)") })
		if at < 0 || !strings.Contains(lines[at+1], "95.0 ms nginx") || !strings.Contains(lines[at+1], ":2]:40112") ||
			!strings.Contains(lines[at+2], "12.0 ms postgres") {
			t.Fatalf("%d columns: slowest readers missing or out of order:\n%s", w, screen)
		}
		beside := strings.Contains(lines[at], "tcp-socket-read") || strings.Contains(lines[at], "│")
		if beside != (w >= 100) {
			t.Errorf("%d columns: readers beside the heatmap %v, want %v:\n%s", w, beside, w >= 100, screen)
		}
	}
}

// TestGoldenLatency renders the latency view without colour, as
// TestGoldenScreens does the table.
func TestGoldenLatency(t *testing.T) {
	withReadWait := latencyHeader
	withReadWait.ReadWait = true
	for _, tc := range []struct {
		name  string
		h     Header
		w, h2 int
	}{
		{"latency-80x24", latencyHeader, 80, 24},
		{"latency-read-wait-120x30", withReadWait, 120, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newLatencyModel(t, tc.h, tc.w, tc.h2, 40, 30)
			press(m, "L")
			got := m.Render(PlainTheme())
			checkScreen(t, got, tc.w, tc.h2)
			compareGolden(t, tc.name, got)
		})
	}
}

// TestLatencyViewTinyTerminals: the latency view, with read wait, on
// terminals too small for it still fills exactly the screen.
func TestLatencyViewTinyTerminals(t *testing.T) {
	h := latencyHeader
	h.ReadWait = true
	for _, size := range [][2]int{{40, 6}, {80, 5}, {80, 4}, {12, 8}, {200, 3}, {1, 1}} {
		m := newLatencyModel(t, h, size[0], size[1], 5, 3)
		press(m, "L")
		checkScreen(t, m.Render(PlainTheme()), size[0], size[1])
		press(m, "down", "down", "down")
		checkScreen(t, m.Render(PlainTheme()), size[0], size[1])
	}
}
