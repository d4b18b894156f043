// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/output"
	"github.com/stacktop/stacktop/internal/testenv"
)

// resolvedPeer is a loopback address the test names in /etc/hosts, so
// resolving it sends nothing over any network.
const resolvedPeer, resolvedName = "127.0.0.85", "stl-resolved-peer.test"

// namedServer listens on resolvedPeer and keeps a connection to it busy
// until the test ends; it returns the port.
func namedServer(t *testing.T) int {
	t.Helper()
	testenv.AddHosts(t, resolvedPeer+" "+resolvedName)
	ln := testenv.ServeLocalTCP(t, resolvedPeer+":0", func(c net.Conn) { io.Copy(io.Discard, c) })
	keepSending(t, ln.Addr().String(), 64)
	return ln.Addr().(*net.TCPAddr).Port
}

// TestStreamResolve: with --resolve, stream names the connection to a peer
// that /etc/hosts names, in JSON's remote_host and CSV's remote_host
// column, once the lookup has answered (it never delays a refresh, so the
// first refreshes may say ""); without it, remote_host is always "".
func TestStreamResolve(t *testing.T) {
	testenv.RequireRoot(t)
	port := namedServer(t)
	common := []string{"--count", "8", "--interval", "300ms", "--port", strconv.Itoa(port)}
	ours := func(addr string, rport string) bool { return addr == resolvedPeer && rport == strconv.Itoa(port) }
	noTraffic := func(*testing.T) {}

	for _, resolve := range []bool{true, false} {
		args := append([]string{"stream", "--format", "json"}, common...)
		if resolve {
			args = append(args, "--resolve")
		}
		out := streamRunWith(t, noTraffic, args...)
		var named, records int
		s := bufio.NewScanner(strings.NewReader(out))
		for s.Scan() {
			var r conn.Record
			if err := json.Unmarshal(s.Bytes(), &r); err != nil {
				t.Fatalf("line %q: %v", s.Text(), err)
			}
			if r.Event == "" || !ours(r.RemoteAddr.String(), strconv.Itoa(int(r.RemotePort))) {
				continue
			}
			records++
			switch {
			case r.RemoteHost == resolvedName:
				named++
			case r.RemoteHost != "":
				t.Errorf("--resolve=%v: remote_host %q, want %q or nothing yet", resolve, r.RemoteHost, resolvedName)
			}
		}
		if records == 0 || (named > 0) != resolve {
			t.Errorf("--resolve=%v: %d of %d records of the connection named %s", resolve, named, records, resolvedName)
		}
	}

	out := streamRunWith(t, noTraffic, append([]string{"stream", "--format", "csv", "--resolve"}, common...)...)
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) < 2 || !slices.Equal(rows[0], output.Header) {
		t.Fatalf("CSV: %v, header %v", err, rows[:min(len(rows), 1)])
	}
	col := func(name string) int { return slices.Index(output.Header, name) }
	named := slices.ContainsFunc(rows[1:], func(row []string) bool {
		return ours(row[col("remote_addr")], row[col("remote_port")]) && row[col("remote_host")] == resolvedName
	})
	if !named {
		t.Errorf("no CSV row names %s:\n%s", resolvedName, out)
	}
}

// TestTopResolveUnderTmux: top --resolve shows the name in its Host column.
func TestTopResolveUnderTmux(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "tmux")
	port := namedServer(t)
	pane := startPane(t, 160, 24, "", "top", "--interval", "300ms", "--resolve", "--port", strconv.Itoa(port))
	pane.await("the Host column naming the peer", func(s string) bool {
		return strings.Contains(s, " Host ") && strings.Contains(s, resolvedName)
	})
	pane.keys("q")
	pane.expectExit(0)
}
