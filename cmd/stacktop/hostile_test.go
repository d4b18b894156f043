// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/testenv"
	"github.com/stacktop/stacktop/internal/testenv/reexec"
)

// TestStreamEscapesHostileProcessNames: a process that names itself
// "ev\nX\x1b[31m" with prctl(PR_SET_NAME) and moves bytes must show up in
// stream text on one line, escaped, with no control character raw.
func TestStreamEscapesHostileProcessNames(t *testing.T) {
	testenv.RequireRoot(t)
	tr := newTraffic(t, "stc-hostile", 61)
	const hostile = "ev\nX\x1b[31m"
	exchange := func(t *testing.T) {
		// The kernel takes the name of the thread that sends.
		if err := testenv.OnNamedThread(hostile, func() error { tr.exchange(t); return nil }); err != nil {
			t.Error(err)
		}
	}
	out := streamRunWith(t, exchange, "stream", "--count", "4", "--interval", "400ms", "--port", strconv.Itoa(tr.port))
	if strings.ContainsAny(out, "\x1b\r") || strings.Contains(out, "\nX") {
		t.Errorf("raw control characters in stream text:\n%q", out)
	}
	if !strings.Contains(out, `/ev\nX\x1b[31m `) {
		t.Errorf("the escaped name is not shown:\n%s", out)
	}
}

// TestStreamNetnsVocabulary: stream takes latency's namespace spellings with
// latency's meaning (they failed with ENOENT): 0 is our namespace, -1 every
// one. The held connection has one end here and one, with the listener, in
// the peer namespace.
func TestStreamNetnsVocabulary(t *testing.T) {
	testenv.RequireRoot(t)
	tr := newTraffic(t, "stc-nsvoc", 63)
	for netns, want := range map[string]int{"0": 1, "/proc/self/ns/net": 1, "-1": 3, tr.peer.Name: 2} {
		out := streamRunWith(t, func(*testing.T) {}, "stream", "--count", "1", "--interval", "200ms",
			"--format", "csv", "--port", strconv.Itoa(tr.port), "--netns", netns)
		// Records, not lines: a comm may hold a newline (quoted in CSV).
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatalf("--netns %s: %v:\n%s", netns, err, out)
		}
		if got := len(rows) - 1; got != want {
			t.Errorf("--netns %s: %d connections, want %d:\n%s", netns, got, want, out)
		}
	}
}

// Names that are not valid UTF-8, as any local user can give a process (its
// executable's name) or a delegated cgroup, and how every output writes
// them.
const (
	hostileComm, hostileCommShown     = "bad\xff\xfe", `bad\xff\xfe`
	hostileCgroup, hostileCgroupShown = "/stacktop-test-\xff\xfe", `/stacktop-test-\xff\xfe`
)

// hostileClient starts a process named hostileComm in the cgroup
// hostileCgroup that connects to a loopback listener once told to, and
// returns the listener's port and that call.
func hostileClient(t *testing.T) (port int, connect func()) {
	t.Helper()
	newCgroup(t, hostileCgroup)
	l := testenv.ServeLoopbackTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	_, connect = clientIn(t, reexec.CommandAs(t, hostileComm, "pod-client", podAddrEnv+"="+l.Addr().String()), hostileCgroup)
	return l.Addr().(*net.TCPAddr).Port, connect
}

// TestHostileNamesInMachineFormats: a connection of a process and cgroup
// named with bytes that are not UTF-8 is in stream's JSON (valid JSON, every
// line) and CSV (valid UTF-8) under the names escaped as the terminal shows
// them, and in serve's series under the same names, beside stacktop's own
// series, with no scrape error.
func TestHostileNamesInMachineFormats(t *testing.T) {
	testenv.RequireRoot(t)
	port, connect := hostileClient(t)
	out := streamRunWith(t, func(*testing.T) { connect() }, "stream", "--format", "json", "--count", "3",
		"--interval", "400ms", "--port", strconv.Itoa(port))
	var seen int
	for line := range strings.Lines(out) {
		var r conn.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil || !utf8.ValidString(line) {
			t.Fatalf("not valid JSON: %q (%v)", line, err)
		}
		if r.RemotePort == uint16(port) {
			seen++
			if r.Comm != hostileCommShown || r.Cgroup != hostileCgroupShown {
				t.Errorf("comm %q, cgroup %q; want %q, %q", r.Comm, r.Cgroup, hostileCommShown, hostileCgroupShown)
			}
		}
	}
	if seen == 0 {
		t.Fatalf("the client's connection is not in the JSON:\n%s", out)
	}

	// The connection now exists before start-up: its owner comes from
	// where pre-existing sockets' owners come from.
	out = streamRunWith(t, func(*testing.T) {}, "stream", "--format", "csv", "--count", "1",
		"--interval", "200ms", "--port", strconv.Itoa(port))
	if !utf8.ValidString(out) || !strings.Contains(out, ","+hostileCommShown+","+hostileCgroupShown+",") {
		t.Errorf("CSV without the escaped names, or not UTF-8:\n%q", out)
	}

	url := startServe(t)
	want := `stacktop_open_connections{cgroup="` + strings.ReplaceAll(hostileCgroupShown, `\`, `\\`) +
		`",comm="` + strings.ReplaceAll(hostileCommShown, `\`, `\\`) + `",`
	var body string
	// Ready means attached: the first snapshot may still be on its way.
	testenv.Eventually(t, 30*time.Second, "the connection's series", func() error {
		if body = scrape(t, url); !strings.Contains(body, want) {
			return fmt.Errorf("no series %s...:\n%s", want, strings.Join(seriesOf(body, "stacktop_open_connections"), "\n"))
		}
		return nil
	})
	for _, name := range []string{`stacktop_lost_events_total{source="connections"}`, `stacktop_scrape_error{source="connections"} 0`} {
		if !strings.Contains(body, name) {
			t.Errorf("%s is missing", name)
		}
	}
}
