// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"cmp"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/conn"
)

func newFixtureModel(t *testing.T, w, h int) *Model {
	t.Helper()
	return newModelOf(t, fixtureHeader, fixture(), w, h)
}

// newModelOf is a w×h screen of snap under header h.
func newModelOf(t *testing.T, header Header, snap conn.Snapshot, w, h int) *Model {
	t.Helper()
	m := NewModel(header, Sort{})
	m.Resize(w, h)
	m.Update(snap)
	return m
}

func press(m *Model, keys ...string) {
	for _, k := range keys {
		m.Key(k)
	}
}

func typeText(m *Model, s string) {
	for _, r := range s {
		m.Key(string(r))
	}
}

// key is the test's own reading of each sort column, independent of the
// comparators under test.
var sortExpectations = map[ColumnID]func(a, b conn.Record) int{
	ColProto: func(a, b conn.Record) int { return strings.Compare(a.Proto, b.Proto) },
	ColLocal: func(a, b conn.Record) int { return compareEndpoint(a.LocalAddr, a.LocalPort, b.LocalAddr, b.LocalPort) },
	ColRemote: func(a, b conn.Record) int {
		return compareEndpoint(a.RemoteAddr, a.RemotePort, b.RemoteAddr, b.RemotePort)
	},
	ColPID:        func(a, b conn.Record) int { return cmp.Compare(a.PID, b.PID) },
	ColProcess:    func(a, b conn.Record) int { return strings.Compare(a.Comm, b.Comm) },
	ColState:      func(a, b conn.Record) int { return strings.Compare(a.State, b.State) },
	ColRateIn:     func(a, b conn.Record) int { return cmp.Compare(a.RateIn, b.RateIn) },
	ColRateOut:    func(a, b conn.Record) int { return cmp.Compare(a.RateOut, b.RateOut) },
	ColRTT:        func(a, b conn.Record) int { return cmp.Compare(a.RTTus, b.RTTus) },
	ColBytesIn:    func(a, b conn.Record) int { return cmp.Compare(a.BytesIn, b.BytesIn) },
	ColBytesOut:   func(a, b conn.Record) int { return cmp.Compare(a.BytesOut, b.BytesOut) },
	ColPacketsIn:  func(a, b conn.Record) int { return cmp.Compare(a.PacketsIn, b.PacketsIn) },
	ColPacketsOut: func(a, b conn.Record) int { return cmp.Compare(a.PacketsOut, b.PacketsOut) },
	ColRetrans:    func(a, b conn.Record) int { return cmp.Compare(a.Retrans, b.Retrans) },
	ColDropsIn:    func(a, b conn.Record) int { return cmp.Compare(a.DropsIn, b.DropsIn) },
	ColCgroup:     func(a, b conn.Record) int { return strings.Compare(a.Cgroup, b.Cgroup) },
	ColPod: func(a, b conn.Record) int {
		return strings.Compare(podText(&Row{Record: a}), podText(&Row{Record: b}))
	},
	ColReadWait: func(a, b conn.Record) int { return cmp.Compare(a.ReadWaitP99us, b.ReadWaitP99us) },
}

func compareEndpoint(a netip.Addr, ap uint16, b netip.Addr, bp uint16) int {
	return cmp.Or(a.Unmap().Compare(b.Unmap()), cmp.Compare(ap, bp))
}

// canonical is the documented tie order: protocol, local, remote, PID.
func canonical(a, b conn.Record) int {
	return cmp.Or(strings.Compare(a.Proto, b.Proto),
		compareEndpoint(a.LocalAddr, a.LocalPort, b.LocalAddr, b.LocalPort),
		compareEndpoint(a.RemoteAddr, a.RemotePort, b.RemoteAddr, b.RemotePort),
		cmp.Compare(a.PID, b.PID))
}

func shownRecords(m *Model) []conn.Record {
	var out []conn.Record
	for _, r := range m.shown {
		out = append(out, r.Record)
	}
	return out
}

// checkOrder verifies that rows follow the column in the given direction
// and that ties keep the canonical order whichever the direction.
func checkOrder(t *testing.T, recs []conn.Record, id ColumnID, desc bool) {
	t.Helper()
	primary := sortExpectations[id]
	for i := 1; i < len(recs); i++ {
		a, b := recs[i-1], recs[i]
		c := primary(a, b)
		if desc {
			c = -c
		}
		if c > 0 || (c == 0 && canonical(a, b) > 0) {
			t.Fatalf("sort %s desc=%v: row %d (%s %s:%d pid %d) before row %d (%s %s:%d pid %d)", id, desc,
				i-1, a.Comm, a.RemoteAddr, a.RemotePort, a.PID, i, b.Comm, b.RemoteAddr, b.RemotePort, b.PID)
		}
	}
}

func TestSortByEveryKeyBothDirections(t *testing.T) {
	for key, id := range map[string]ColumnID{"r": ColRateIn, "R": ColRateOut, "p": ColPID, "n": ColProcess,
		"s": ColState, "t": ColRTT, "a": ColLocal, "A": ColRemote, "P": ColProto} {
		t.Run(key, func(t *testing.T) {
			m := newFixtureModel(t, 200, 40)
			if id == DefaultSort.Column {
				press(m, key) // already sorted by it: the first press flips
			}
			press(m, key)
			first := m.sorts[connView]
			if first.Column != id || first.Desc != columns[id].descFirst {
				t.Fatalf("after %q: sort %+v, want %s desc=%v", key, first, id, columns[id].descFirst)
			}
			checkOrder(t, shownRecords(m), id, first.Desc)
			press(m, key)
			if s := m.sorts[connView]; s.Column != id || s.Desc == first.Desc {
				t.Fatalf("second %q did not flip: %+v", key, s)
			}
			checkOrder(t, shownRecords(m), id, !first.Desc)
		})
	}
}

// Columns without a key of their own sort through header selection.
func TestSortByHeaderSelection(t *testing.T) {
	m := newFixtureModel(t, 250, 40)
	press(m, "c")
	for _, id := range connView.visible(true) {
		for range 20 {
			if m.cursor == id {
				break
			}
			press(m, "tab")
		}
		if m.cursor != id {
			t.Fatalf("tab never reached %s", id)
		}
		press(m, "enter")
		s := m.sorts[connView]
		if s.Column != id {
			t.Fatalf("enter on %s sorted by %s", id, s.Column)
		}
		checkOrder(t, shownRecords(m), id, s.Desc)
		press(m, "enter")
		checkOrder(t, shownRecords(m), id, !s.Desc)
	}
}

func TestHeaderCursorWrapsAndFollowsLayout(t *testing.T) {
	m := newFixtureModel(t, 200, 40)
	if m.cursor != ColRateIn {
		t.Fatalf("cursor starts on %s, want the sort column", m.cursor)
	}
	press(m, "right", "right", "right")
	if m.cursor != ColProto {
		t.Fatalf("right past the last column: %s, want wrap to proto", m.cursor)
	}
	press(m, "left", "shift+tab")
	if m.cursor != ColRateOut {
		t.Fatalf("left twice from proto: %s, want rate-out", m.cursor)
	}
	m.Resize(60, 40) // rate-out no longer fits: the cursor restarts from the edge
	press(m, "tab")
	if m.cursor != m.layout.cols[0].id {
		t.Fatalf("tab from a dropped column: %s, want %s", m.cursor, m.layout.cols[0].id)
	}
	if !strings.Contains(m.Render(PlainTheme()), "Enter: sort by "+m.layout.cols[0].title) {
		t.Fatalf("status bar does not offer the selected column:\n%s", m.Render(PlainTheme()))
	}
}

func TestFilter(t *testing.T) {
	comms := func(m *Model) []string {
		var out []string
		for _, r := range m.shown {
			out = append(out, fmt.Sprintf("%s:%d", r.Comm, r.LocalPort))
		}
		return out
	}
	for _, tc := range []struct {
		typed string
		want  []string
	}{
		{"nginx", []string{"nginx:443", "nginx:443", "nginx:443", "nginx:443"}},
		{"NGINX", []string{"nginx:443", "nginx:443", "nginx:443", "nginx:443"}},
		{"5432", []string{"python3:49822", "postgres:5432"}},                          // port, either side
		{"2301", []string{"python3:49822"}},                                           // PID
		{"151.101", []string{"curl:38214"}},                                           // address
		{"fd00:5354:130::2", []string{"nginx:443"}},                                   // IPv6 address
		{"sshd.service", []string{"sshd:22"}},                                         // cgroup
		{"systemd-res", []string{"systemd-resolved:53211", "systemd-resolved:53211"}}, // name
		{"no-such-thing", nil},
	} {
		m := newFixtureModel(t, 200, 40)
		press(m, "/")
		typeText(m, tc.typed)
		if got := comms(m); !slices.Equal(got, tc.want) {
			t.Errorf("filter %q: %v, want %v", tc.typed, got, tc.want)
		}
	}
}

func TestFilterEditing(t *testing.T) {
	m := newFixtureModel(t, 200, 40)
	press(m, "/")
	typeText(m, "qx")
	if m.filter != "qx" || !m.typing {
		t.Fatalf("q while typing a filter must be text: filter %q typing %v", m.filter, m.typing)
	}
	press(m, "backspace", "backspace")
	typeText(m, "curl")
	press(m, "enter")
	if m.typing || m.filter != "curl" || len(m.shown) != 1 {
		t.Fatalf("enter keeps the filter: typing %v filter %q rows %d", m.typing, m.filter, len(m.shown))
	}
	if !strings.Contains(m.Render(PlainTheme()), `filter "curl"`) {
		t.Fatal("status bar does not show the active filter")
	}
	press(m, "esc")
	if m.filter != "" || len(m.shown) != len(fixture().Records) {
		t.Fatalf("esc must clear the filter: %q, %d rows", m.filter, len(m.shown))
	}
	press(m, "/", "x", "esc")
	if m.typing || m.filter != "" {
		t.Fatal("esc while typing must clear and leave the filter")
	}
	if m.Key("ctrl+c") != true {
		t.Fatal("ctrl+c must quit")
	}
}

// ids are the columns on screen, in order.
func ids(m *Model) []ColumnID {
	var out []ColumnID
	for _, c := range m.layout.cols {
		out = append(out, c.id)
	}
	return out
}

func TestColumnToggle(t *testing.T) {
	m := newFixtureModel(t, 250, 40)
	base := []ColumnID{ColProto, ColLocal, ColRemote, ColPID, ColProcess, ColState, ColRateIn, ColRateOut, ColRTT}
	extra := append(slices.Clone(base), ColBytesIn, ColBytesOut, ColPacketsIn, ColPacketsOut, ColRetrans, ColDropsIn, ColPod, ColCgroup)
	if got := ids(m); !slices.Equal(got, base) {
		t.Fatalf("default columns %v, want %v", got, base)
	}
	press(m, "c")
	if got := ids(m); !slices.Equal(got, extra) {
		t.Fatalf("after c: %v, want %v", got, extra)
	}
	press(m, "g")
	procExtra := []ColumnID{ColPID, ColProcess, ColConns, ColBytesIn, ColBytesOut, ColRateIn, ColRateOut, ColPacketsIn, ColPacketsOut, ColRetrans, ColDropsIn, ColRTT, ColPod, ColCgroup}
	if got := ids(m); !slices.Equal(got, procExtra) {
		t.Fatalf("per-process with extras: %v, want %v", got, procExtra)
	}
	press(m, "c", "g")
	hosts := []ColumnID{ColRemote, ColConns, ColBytesIn, ColBytesOut, ColRateIn, ColRateOut, ColRTT}
	if got := ids(m); !slices.Equal(got, hosts) {
		t.Fatalf("per-host without extras: %v, want %v", got, hosts)
	}
	press(m, "g")
	if got := ids(m); !slices.Equal(got, base) {
		t.Fatalf("g from remote hosts: %v, want the connections' %v", got, base)
	}
}

func TestPerProcessAggregation(t *testing.T) {
	m := newFixtureModel(t, 200, 40)
	press(m, "g")
	// totals lists the summed quantities; open connections count as 1.
	totals := func(r conn.Record) [8]float64 {
		open := 1.0
		if r.Event == conn.Closed {
			open = 0
		}
		return [8]float64{open, float64(r.BytesIn), float64(r.BytesOut), float64(r.PacketsIn),
			float64(r.PacketsOut), r.RateIn, r.RateOut, float64(r.Retrans)}
	}
	want := map[uint32][8]float64{}
	for _, r := range fixture().Records {
		sum, add := want[r.PID], totals(r)
		for i := range sum {
			sum[i] += add[i]
		}
		want[r.PID] = sum
	}
	if len(m.shown) != len(want) {
		t.Fatalf("%d process rows, want %d", len(m.shown), len(want))
	}
	for _, r := range m.shown {
		got := totals(r.Record)
		got[0] = float64(r.Conns)
		if got != want[r.PID] {
			t.Errorf("pid %d (%s): conns, bytes, packets, rates, retrans %v, want %v", r.PID, r.Comm, got, want[r.PID])
		}
	}
	nginx := m.shown[slices.IndexFunc(m.shown, func(r *Row) bool { return r.Comm == "nginx" })]
	if nginx.Conns != 3 || nginx.BytesOut != 93_512_004+512_000+1_024 || nginx.RTTus != 240 {
		t.Errorf("nginx: conns %d bytes out %d rtt %d", nginx.Conns, nginx.BytesOut, nginx.RTTus)
	}
	checkOrder(t, shownRecords(m), ColRateIn, true)

	// The filter picks connections first, then they are summed.
	press(m, "/")
	typeText(m, "198.18.130.2")
	if len(m.shown) != 1 || m.shown[0].Comm != "nginx" || m.shown[0].BytesOut != 93_512_004 || m.shown[0].Conns != 1 {
		t.Fatalf("filtered per-process rows: %+v", m.shown)
	}
	press(m, "enter", "esc")

	// Sorting applies to the per-process rows, and a connection-only column is refused.
	press(m, "p")
	checkOrder(t, shownRecords(m), ColPID, false)
	press(m, "s")
	if m.sorts[processView].Column != ColPID || !strings.Contains(m.Render(PlainTheme()), "no State column in the processes view") {
		t.Fatalf("s in the per-process view: sort %+v", m.sorts[processView])
	}
	press(m, "g", "g")
	if m.sorts[connView] != DefaultSort {
		t.Fatalf("each view keeps its own sort; connections view now %+v", m.sorts[connView])
	}
}

// TestPerHostAggregation: the third view sums connections by remote
// address (ports, protocols and processes together), leaves out sockets
// without a peer, keeps the worst RTT, and sorts and filters like the others.
func TestPerHostAggregation(t *testing.T) {
	m := newFixtureModel(t, 200, 50)
	press(m, "g", "g")
	if m.view.name != "remote hosts" {
		t.Fatalf("g twice: %s view, want remote hosts", m.view.name)
	}
	type sums struct {
		conns             int
		bytesIn, bytesOut uint64
		rateIn, rateOut   float64
		rtt               uint32
	}
	want := map[string]sums{}
	for _, r := range fixture().Records {
		if r.RemoteAddr.IsUnspecified() {
			continue
		}
		s := want[r.RemoteAddr.String()]
		if r.Event != conn.Closed {
			s.conns++
		}
		s.bytesIn += r.BytesIn
		s.bytesOut += r.BytesOut
		s.rateIn += r.RateIn
		s.rateOut += r.RateOut
		s.rtt = max(s.rtt, r.RTTus)
		want[r.RemoteAddr.String()] = s
	}
	if len(m.shown) != len(want) || len(want) != 8 {
		t.Fatalf("%d host rows, want %d (the fixture's 8 peers)", len(m.shown), len(want))
	}
	for _, r := range m.shown {
		got := sums{r.Conns, r.BytesIn, r.BytesOut, r.RateIn, r.RateOut, r.RTTus}
		if got != want[r.Remote] {
			t.Errorf("%s: %+v, want %+v", r.Remote, got, want[r.Remote])
		}
	}
	checkOrder(t, shownRecords(m), ColRateIn, true)
	screen := m.Render(PlainTheme())
	if !strings.Contains(screen, "8 remote hosts") || !strings.Contains(screen, "fd00:5354:130::2 ") {
		t.Errorf("status bar or bare IPv6 host missing:\n%s", screen)
	}

	// 127.0.0.1 is the peer of both ends of the postgres connection: one
	// host, two connections, the worse RTT of the two.
	press(m, "/")
	typeText(m, "5432")
	press(m, "enter")
	if len(m.shown) != 1 || m.shown[0].Remote != "127.0.0.1" || m.shown[0].Conns != 2 || m.shown[0].RTTus != 31 {
		t.Fatalf("filtered host rows: %+v", m.shown)
	}
	press(m, "esc", "t")
	checkOrder(t, shownRecords(m), ColRTT, true)
	press(m, "p")
	if !strings.Contains(m.Render(PlainTheme()), "no PID column in the remote hosts view") {
		t.Errorf("p in the host view is not refused")
	}
	press(m, "g")
	if m.view != m.conns {
		t.Fatalf("g from remote hosts: %s view, want connections", m.view.name)
	}
}

// TestColumnsAndAddressesAtEachSize: at each common terminal size the
// columns follow the stated priority, no line is wider than the terminal,
// every IPv4 endpoint is whole and every IPv6 one whole or abbreviated by
// whole groups with its port; a resize from any size lays out exactly as a
// start at the new size does.
func TestColumnsAndAddressesAtEachSize(t *testing.T) {
	for _, tc := range []struct {
		w, h int
		cols []ColumnID
	}{
		{60, 20, []ColumnID{ColLocal, ColRemote, ColProcess, ColRateIn}},
		{80, 24, []ColumnID{ColLocal, ColRemote, ColPID, ColProcess, ColRateIn, ColRateOut, ColRTT}},
		{100, 30, []ColumnID{ColProto, ColLocal, ColRemote, ColPID, ColProcess, ColState, ColRateIn, ColRateOut, ColRTT}},
		{200, 50, []ColumnID{ColProto, ColLocal, ColRemote, ColPID, ColProcess, ColState, ColRateIn, ColRateOut, ColRTT}},
	} {
		t.Run(fmt.Sprintf("%dx%d", tc.w, tc.h), func(t *testing.T) {
			m := newFixtureModel(t, tc.w, tc.h)
			var got []ColumnID
			for _, c := range m.layout.cols {
				got = append(got, c.id)
			}
			if !slices.Equal(got, tc.cols) {
				t.Fatalf("columns %v, want %v", got, tc.cols)
			}
			screen := m.Render(PlainTheme())
			checkScreen(t, screen, tc.w, tc.h)
			for _, r := range fixture().Records {
				for _, ep := range []string{endpoint(r.LocalAddr, portText(r.LocalPort)), endpoint(r.RemoteAddr, portText(r.RemotePort))} {
					if !strings.Contains(screen, ep) && !strings.Contains(screen, abbreviatedByTest(r, ep)) {
						t.Errorf("%s is neither whole nor abbreviated by groups at %dx%d:\n%s", ep, tc.w, tc.h, screen)
					}
				}
			}
			if strings.Contains(screen, "[fd00:5354:130::2]:40112") != (tc.w >= 200) {
				t.Errorf("the IPv6 endpoint should be whole exactly when there is room (200 columns):\n%s", screen)
			}
			if tc.w < 100 && (strings.Contains(screen, "systemd-resolved") || !regexp.MustCompile(`system\S*…`).MatchString(screen)) {
				t.Errorf("long process names must end in an ellipsis at %d columns", tc.w)
			}
			for _, from := range [][2]int{{200, 50}, {60, 20}} {
				resized := newFixtureModel(t, from[0], from[1])
				resized.Resize(tc.w, tc.h)
				if r := resized.Render(PlainTheme()); r != screen {
					t.Errorf("resized from %v to %dx%d:\n%s\nwant:\n%s", from, tc.w, tc.h, r, screen)
				}
			}
		})
	}
}

// abbreviatedByTest is the least legible form of an IPv6 endpoint of the
// fixture (its first and last group around an ellipsis), written out by
// hand; other endpoints have none.
func abbreviatedByTest(r conn.Record, ep string) string {
	if !strings.HasPrefix(ep, "[fd00:5354:130::") {
		return ep
	}
	return "[fd00:…:" + strings.TrimPrefix(ep, "[fd00:5354:130::")
}

func TestSortColumnSurvivesNarrowing(t *testing.T) {
	m := newFixtureModel(t, 60, 30)
	press(m, "t")
	if !slices.ContainsFunc(m.layout.cols, func(c *column) bool { return c.id == ColRTT }) {
		t.Fatal("the sort column must stay on screen when the terminal is narrow")
	}
}

func TestShorten(t *testing.T) {
	for _, tc := range []struct {
		in    string
		width int
		mode  cutMode
		want  string
	}{
		{"[fd00:5354:130::1]:40112", 24, cutAddr, "[fd00:5354:130::1]:40112"},
		{"[fd00:5354:130::1]:40112", 23, cutAddr, "[fd00:5354:…:1]:40112"},
		{"[fd00:5354:130::1]:40112", 16, cutAddr, "[fd00:…:1]:40112"},
		{"2001:db8:85a3:8d3:1319:8a2e:370:7348", 20, cutAddr, "2001:db8:85a3:…:7348"},
		{"[::1]:631", 9, cutAddr, "[::1]:631"},
		{"systemd-resolved", 8, cutEnd, "systemd…"},
		{"/system.slice/nginx.service", 15, cutHead, "…/nginx.service"},
		{"short", 8, cutEnd, "short"},
		{"anything", 0, cutEnd, ""},
	} {
		got := shorten(tc.in, tc.width, tc.mode)
		if got != tc.want || (tc.width > 0 && ansi.StringWidth(got) > tc.width) {
			t.Errorf("shorten(%q, %d) = %q, want %q", tc.in, tc.width, got, tc.want)
		}
	}
}

func TestPauseKeepsCollecting(t *testing.T) {
	m := newFixtureModel(t, 120, 30)
	press(m, "space")
	next := fixture()
	next.Records = next.Records[:2]
	m.Update(next)
	m.Update(next)
	if len(m.shown) != len(fixture().Records) {
		t.Fatal("a paused display must not change")
	}
	if !strings.Contains(m.Render(PlainTheme()), "PAUSED (2 refreshes waiting)") {
		t.Fatal("status bar must say the display is paused and how much is waiting")
	}
	press(m, "r", "end", "home") // keys still work on the frozen data
	press(m, "space")
	if len(m.shown) != 2 || m.paused {
		t.Fatalf("resuming must show the newest snapshot: %d rows", len(m.shown))
	}
}

func TestScrolling(t *testing.T) {
	m := NewModel(fixtureHeader, Sort{Column: ColLocal})
	m.Resize(120, 15) // 3 header lines, column header, status bar: 10 rows
	var recs []conn.Record
	for i := range 100 {
		r := fixture().Records[0]
		r.LocalPort = uint16(10000 + i)
		recs = append(recs, r)
	}
	m.Update(conn.Snapshot{Time: fixtureTime, Records: recs})
	first := func() uint16 { return m.shown[m.offset].LocalPort }
	for _, step := range []struct {
		key  string
		want uint16
	}{
		{"down", 10001}, {"j", 10002}, {"k", 10001}, {"up", 10000}, {"up", 10000},
		{"pgdown", 10009}, {"pgup", 10000}, {"end", 10090}, {"down", 10090}, {"home", 10000},
	} {
		press(m, step.key)
		if first() != step.want {
			t.Fatalf("after %s the first row is port %d, want %d", step.key, first(), step.want)
		}
	}
	press(m, "end")
	m.Resize(120, 25) // a taller terminal shows more rows, never blank space below the last one
	if first() != 10080 {
		t.Fatalf("after growing, first row %d, want 10080", first())
	}
}

func TestHelpOverlayAndQuit(t *testing.T) {
	m := newFixtureModel(t, 100, 30)
	press(m, "?")
	if !strings.Contains(m.Render(PlainTheme()), "Space pause") {
		t.Fatal("? must show the key help")
	}
	if m.Key("r") || m.help {
		t.Fatal("any key closes the help")
	}
	if m.sorts[connView] != DefaultSort {
		t.Fatal("the key that closes the help must not act")
	}
	press(m, "?")
	if !m.Key("q") {
		t.Fatal("q quits from the help overlay too")
	}
	if !newFixtureModel(t, 100, 30).Key("q") {
		t.Fatal("q must quit")
	}
}

func TestParseSort(t *testing.T) {
	for in, want := range map[string]Sort{
		"rate-in":       {ColRateIn, true},
		"PID":           {ColPID, false},
		"process":       {ColProcess, false},
		"rtt:asc":       {ColRTT, false},
		"remote:desc":   {ColRemote, true},
		"packets-out":   {ColPacketsOut, true},
		"conns":         {ColConns, true},
		"cgroup:asc":    {ColCgroup, false},
		"bytes-in:desc": {ColBytesIn, true},
	} {
		got, err := ParseSort(in)
		if err != nil || got != want {
			t.Errorf("ParseSort(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "speed", "rtt:up", "rate-in:"} {
		_, err := ParseSort(bad)
		named := "--sort"
		if bad != "" {
			named = fmt.Sprintf("--sort %q", bad)
		}
		if clierr.Code(err) != clierr.ExitUsage || !strings.Contains(err.Error(), named) {
			t.Errorf("ParseSort(%q): %v (exit %d), want a usage error naming the flag and value", bad, err, clierr.Code(err))
		}
	}
}

func TestInitialSortInProcessView(t *testing.T) {
	m := NewModel(fixtureHeader, Sort{Column: ColState})
	if m.sorts[processView] != DefaultSort {
		t.Fatalf("state does not exist per process: the process view keeps the default, got %+v", m.sorts[processView])
	}
	m = NewModel(fixtureHeader, Sort{Column: ColPID})
	if m.sorts[processView].Column != ColPID {
		t.Fatal("an initial sort that exists per process applies there too")
	}
	m = NewModel(fixtureHeader, Sort{Column: ColConns, Desc: true})
	if m.sorts[connView] != DefaultSort || m.sorts[processView].Column != ColConns || m.cursor != DefaultSort.Column {
		t.Fatalf("--sort conns: connections %+v, processes %+v, cursor %s", m.sorts[connView], m.sorts[processView], m.cursor)
	}
}

func TestHumanFormats(t *testing.T) {
	for v, want := range map[float64]string{0: "0B", 999: "999B", 1000: "0.98KiB", 1024: "1.00KiB", 1264: "1.23KiB",
		102_348: "99.9KiB", 102_349: "100KiB", 1_023_487: "999KiB", 1_023_488: "0.98MiB", 13_002_342: "12.4MiB", 3.52e12: "3.20TiB"} {
		if got := humanBytes(v); got != want {
			t.Errorf("humanBytes(%v) = %q, want %q", v, got, want)
		}
	}
	for us, want := range map[uint32]string{0: "-", 31: "31 µs", 999: "999 µs", 18_250: "18.2 ms", 2_500_000: "2.50 s"} {
		if got := humanRTT(us); got != want {
			t.Errorf("humanRTT(%d) = %q, want %q", us, got, want)
		}
	}
	a := netip.MustParseAddr
	for _, tc := range []struct {
		addr netip.Addr
		port uint16
		want string
	}{
		{a("10.0.0.1"), 80, "10.0.0.1:80"}, {a("::ffff:10.0.0.1"), 80, "10.0.0.1:80"}, {a("fd00::1"), 443, "[fd00::1]:443"},
		{a("0.0.0.0"), 22, "*:22"}, {a("::"), 0, "*:*"}, {netip.Addr{}, 0, "*:*"},
	} {
		if got := endpoint(tc.addr, portText(tc.port)); got != tc.want {
			t.Errorf("endpoint(%s, %d) = %q, want %q", tc.addr, tc.port, got, tc.want)
		}
	}
}

func TestBandwidthLevels(t *testing.T) {
	for bps, want := range map[float64]int{0: 0, 0.5: 0, 1: 1, 10<<10 - 1: 1, 10 << 10: 2, 1<<20 - 1: 2,
		1 << 20: 3, 100<<20 - 1: 3, 100 << 20: 4, 1e12: 4} {
		if got := bandwidthLevel(bps); got != want {
			t.Errorf("bandwidthLevel(%v) = %d, want %d", bps, got, want)
		}
	}
}

// With --read-wait, w sorts by the p99 read wait (worst first, again:
// flips), the column sits after RTT, and the per-process view shows each
// process's worst connection. Without it the column is absent and w says
// how to turn it on; every other key keeps working.
func TestReadWaitColumn(t *testing.T) {
	m := NewModel(readWaitHeader, Sort{})
	m.Resize(250, 40)
	m.Update(fixture())
	want := []ColumnID{ColProto, ColLocal, ColRemote, ColPID, ColProcess, ColState, ColRateIn, ColRateOut, ColRTT, ColReadWait}
	if got := ids(m); !slices.Equal(got, want) {
		t.Fatalf("columns with read wait %v, want %v", got, want)
	}
	press(m, "w")
	if s := m.sorts[m.conns]; s != (Sort{ColReadWait, true}) {
		t.Fatalf("w: sort %+v, want read-wait descending", s)
	}
	checkOrder(t, shownRecords(m), ColReadWait, true)
	if top := m.shown[0]; top.RemotePort != 40112 || !strings.Contains(m.Render(PlainTheme()), "95.0 ms") {
		t.Fatalf("the neglected connection is not on top: %+v", top.Record)
	}
	press(m, "w")
	checkOrder(t, shownRecords(m), ColReadWait, false)
	for _, k := range []string{"r", "R", "p", "n", "s", "t", "a", "A", "P"} { // the others still sort
		press(m, k)
		if m.sorts[m.conns].Column != sortKeys[k] {
			t.Fatalf("%s no longer sorts with read wait on", k)
		}
	}

	press(m, "g")
	if got := ids(m); !slices.Contains(got, ColReadWait) {
		t.Fatalf("per-process columns %v lack the read wait", got)
	}
	press(m, "w")
	checkOrder(t, shownRecords(m), ColReadWait, true)
	worst := map[string]uint64{}
	for _, r := range fixture().Records {
		worst[r.Comm] = max(worst[r.Comm], r.ReadWaitP99us)
	}
	for _, r := range m.shown {
		if r.ReadWaitP99us != worst[r.Comm] {
			t.Errorf("%s: read wait %d, want its worst connection's %d", r.Comm, r.ReadWaitP99us, worst[r.Comm])
		}
	}
	if m.shown[0].Comm != "nginx" {
		t.Fatalf("worst process first: %s", m.shown[0].Comm)
	}

	off := newFixtureModel(t, 250, 40)
	press(off, "w")
	screen := off.Render(PlainTheme())
	if off.sorts[connView] != DefaultSort || !strings.Contains(screen, "read wait is off: start with --read-wait") ||
		strings.Contains(screen, "Wait p99") {
		t.Fatalf("w without read wait: sort %+v\n%s", off.sorts[connView], screen)
	}
	if s, err := ParseSort("read-wait"); err != nil || s != (Sort{ColReadWait, true}) {
		t.Fatalf("--sort read-wait: %+v, %v", s, err)
	}
}
