// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/stacktop/stacktop/internal/conn"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata from the current rendering")

// TestGoldenScreens renders fixed scenes without colour at fixed sizes and
// compares them with testdata/*.golden byte for byte. After an intended
// change, run `go test ./internal/tui -run Golden -update` and review the diff.
func TestGoldenScreens(t *testing.T) {
	for _, tc := range []struct {
		name   string
		w, h   int
		keys   []string
		snap   func() conn.Snapshot // nil: the fixture
		header *Header              // nil: fixtureHeader
	}{
		{name: "default-100x24", w: 100, h: 24},
		{name: "default-80x24", w: 80, h: 24},
		{name: "narrow-60x20", w: 60, h: 20},
		{name: "wide-extra-200x20", w: 200, h: 20, keys: []string{"c"}},
		{name: "per-process-100x20", w: 100, h: 20, keys: []string{"g"}},
		{name: "per-host-80x24", w: 80, h: 24, keys: []string{"g", "g"}},
		{name: "help-100x30", w: 100, h: 30, keys: []string{"?"}},
		{name: "help-80x24", w: 80, h: 24, keys: []string{"?"}},
		{name: "filter-typing-100x16", w: 100, h: 16, keys: []string{"/", "4", "4", "3"}},
		{name: "sorted-remote-desc-selected-100x20", w: 100, h: 20, keys: []string{"A", "A", "left", "left"}},
		{name: "paused-100x16", w: 100, h: 16, keys: []string{"space"}},
		{name: "lost-events-100x16", w: 100, h: 16, snap: func() conn.Snapshot {
			s := fixture()
			s.Lost, s.MapFull = 12, 3
			return s
		}},
		{name: "short-40x6", w: 40, h: 6},
		{name: "read-wait-100x20", w: 100, h: 20, keys: []string{"w"}, header: &readWaitHeader},
		{name: "read-wait-per-process-100x20", w: 100, h: 20, keys: []string{"g", "w"}, header: &readWaitHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := fixtureHeader
			if tc.header != nil {
				h = *tc.header
			}
			m := NewModel(h, Sort{})
			m.Resize(tc.w, tc.h)
			snap := fixture
			if tc.snap != nil {
				snap = tc.snap
			}
			m.Update(snap())
			press(m, tc.keys...)
			if tc.name == "paused-100x16" {
				m.Update(snap())
			}
			got := m.Render(PlainTheme())
			checkScreen(t, got, tc.w, tc.h)
			compareGolden(t, tc.name, got)
		})
	}
}

func TestGoldenBeforeFirstRefresh(t *testing.T) {
	m := NewModel(fixtureHeader, Sort{})
	m.Resize(80, 10)
	got := m.Render(PlainTheme())
	checkScreen(t, got, 80, 10)
	compareGolden(t, "waiting-80x10", got)
}

// The colour theme must say nothing the plain one does not: stripped of
// its escape codes it is the same screen.
func TestColourOnlyEmphasises(t *testing.T) {
	for _, keys := range [][]string{nil, {"c", "tab"}, {"g"}, {"?"}, {"/", "n"}} {
		m := newFixtureModel(t, 120, 24)
		press(m, keys...)
		plain := m.Render(PlainTheme())
		coloured := m.Render(ColorTheme())
		if coloured == plain {
			t.Fatalf("keys %v: the colour theme painted nothing", keys)
		}
		if got := trimLines(ansi.Strip(coloured)); got != trimLines(plain) {
			t.Errorf("keys %v: colour and plain screens differ in text:\n%s\n---\n%s", keys, got, plain)
		}
	}
}

func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func checkScreen(t *testing.T, s string, w, h int) {
	t.Helper()
	lines := strings.Split(s, "\n")
	if len(lines) != h {
		t.Errorf("%d lines, want %d", len(lines), h)
	}
	for i, l := range lines {
		if ansi.StringWidth(l) > w {
			t.Errorf("line %d is %d cells wide on a %d-cell terminal: %q", i, ansi.StringWidth(l), w, l)
		}
	}
}

func compareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("screen differs from %s (run with -update after an intended change)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

// TestHostileNamesEscaped: a process that names itself "ev\nX\x1b[31m" (or
// sits in a cgroup so named) must neither split a row nor reach the
// terminal as an escape sequence, in the per-connection and per-process views.
func TestHostileNamesEscaped(t *testing.T) {
	const hostile = "ev\nX\x1b[31m"
	for _, keys := range [][]string{{"c"}, {"g", "c"}} {
		s := fixture()
		s.Records[0].Comm, s.Records[0].Cgroup = hostile, "/evil\x1b]0;pwned\x07"
		m := NewModel(fixtureHeader, Sort{})
		m.Resize(240, 20)
		m.Update(s)
		press(m, keys...)
		got := m.Render(PlainTheme())
		checkScreen(t, got, 240, 20)
		if strings.ContainsAny(got, "\x1b\x07") {
			t.Errorf("keys %v: raw control characters reach the terminal:\n%q", keys, got)
		}
		if !strings.Contains(got, `ev\nX\x1b[31m`) || !strings.Contains(got, `\x1b]0;pwned\a`) {
			t.Errorf("keys %v: the escaped names are not shown:\n%s", keys, got)
		}
	}
}
