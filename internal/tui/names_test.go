// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/resolve"
)

var resolveHeader = func() Header { h := fixtureHeader; h.Resolve = true; return h }()

// namedFixture is the fixture with the names --resolve found: some peers
// have one, one has a hostile one, the rest none yet.
func namedFixture() conn.Snapshot {
	s := fixture()
	names := map[string]string{
		"151.101.2.132":    "dualstack.n.sni.global.fastly.net",
		"198.18.130.2":     "client-a.lan",
		"fd00:5354:130::2": "client-b.lan",
		"9.9.9.9":          "dns9.quad9.net",
		"140.82.112.4":     "lb-140-82-112-4-iad.github.com",
		"127.0.0.1":        "localhost",
		"1.1.1.1":          "one.one.one.one\x1b[31m",
	}
	for i := range s.Records {
		s.Records[i].RemoteHost = names[s.Records[i].RemoteAddr.String()]
	}
	return s
}

func newNamedModel(t *testing.T, w, h int) *Model {
	t.Helper()
	return newModelOf(t, resolveHeader, namedFixture(), w, h)
}

// TestHostColumn: with --resolve the Host column follows Remote in the
// connections and remote hosts views, outranks Local when space is short
// (at 80 columns it costs RTT, at 100 State),
// shows "-" for a peer not named yet, escapes a hostile name, and the
// filter matches names.
func TestHostColumn(t *testing.T) {
	for _, tc := range []struct {
		w, h int
		cols []ColumnID
	}{
		{80, 24, []ColumnID{ColLocal, ColRemote, ColHost, ColProcess, ColRateIn, ColRateOut}},
		{100, 30, []ColumnID{ColProto, ColLocal, ColRemote, ColHost, ColPID, ColProcess, ColRateIn, ColRateOut, ColRTT}},
		{200, 50, []ColumnID{ColProto, ColLocal, ColRemote, ColHost, ColPID, ColProcess, ColState, ColRateIn, ColRateOut, ColRTT}},
	} {
		t.Run(fmt.Sprintf("%dx%d", tc.w, tc.h), func(t *testing.T) {
			m := newNamedModel(t, tc.w, tc.h)
			if got := ids(m); !slices.Equal(got, tc.cols) {
				t.Fatalf("columns %v, want %v", got, tc.cols)
			}
			screen := m.Render(PlainTheme())
			checkScreen(t, screen, tc.w, tc.h)
			if strings.Contains(screen, "\x1b") || !strings.Contains(screen, `one.one.`) {
				t.Errorf("hostile name not escaped or missing:\n%s", screen)
			}
		})
	}
	m := newNamedModel(t, 200, 50)
	press(m, "/")
	typeText(m, "quad9")
	if len(m.shown) != 1 || m.shown[0].RemoteAddr.String() != "9.9.9.9" {
		t.Fatalf("filter by name: %d rows", len(m.shown))
	}
	press(m, "esc", "g", "g")
	if got := ids(m); !slices.Equal(got, []ColumnID{ColRemote, ColHost, ColConns, ColBytesIn, ColBytesOut, ColRateIn, ColRateOut, ColRTT}) {
		t.Fatalf("remote hosts view columns %v", got)
	}
	if !strings.Contains(m.Render(PlainTheme()), "client-b.lan") {
		t.Errorf("the host view names its hosts:\n%s", m.Render(PlainTheme()))
	}
	off := newFixtureModel(t, 200, 50)
	if slices.Contains(ids(off), ColHost) {
		t.Errorf("Host column without --resolve")
	}
}

var testServices = func() resolve.Services {
	s, err := resolve.ParseServices(strings.NewReader("ssh 22/tcp\nhttps 443/tcp\npostgresql 5432/tcp\ndomain 53/udp\ndomain 53/tcp\n"))
	if err != nil {
		panic(err)
	}
	return s
}()

// TestPortNamesToggle: N shows service names for the ports /etc/services
// names (per protocol), numbers for the others; N again numbers; sorting
// by endpoint still follows the numbers, and a new refresh keeps names.
func TestPortNamesToggle(t *testing.T) {
	m := newFixtureModel(t, 200, 50)
	m.services = testServices
	press(m, "N")
	screen := m.Render(PlainTheme())
	for _, want := range []string{"198.18.130.1:https", "*:ssh", "1.1.1.1:domain", "127.0.0.1:postgresql", "10.1.2.3:38214", "[fd00:5354:130::1]:https"} {
		if !strings.Contains(screen, want) {
			t.Errorf("with names, %q missing:\n%s", want, screen)
		}
	}
	press(m, "a")
	checkOrder(t, shownRecords(m), ColLocal, false)
	m.Update(fixture())
	if !strings.Contains(m.Render(PlainTheme()), "*:ssh") {
		t.Errorf("a new refresh must keep the names")
	}
	press(m, "N")
	if screen := m.Render(PlainTheme()); strings.Contains(screen, "198.18.130.1:https") || !strings.Contains(screen, "*:22") {
		t.Errorf("N again must show numbers:\n%s", screen)
	}
}

// TestGoldenNames renders --resolve and N.
func TestGoldenNames(t *testing.T) {
	m := newNamedModel(t, 80, 24)
	compareGolden(t, "resolve-80x24", m.Render(PlainTheme()))
	m = newFixtureModel(t, 100, 24)
	m.services = testServices
	press(m, "N")
	compareGolden(t, "port-names-100x24", m.Render(PlainTheme()))
}
