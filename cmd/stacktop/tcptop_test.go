// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/testenv"
)

// bcc tcptop's arguments and flags, refused as any other bad input: exit 2
// naming the flag and the value.
func TestTcptopUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tcptop", "soon"}, `invalid --interval "soon": argument 1: not a number of seconds or a duration`},
		{[]string{"tcptop", "0"}, `invalid --interval "0": argument 1: must be from 0.01 to 86400 seconds`},
		{[]string{"tcptop", "1", "-3"}, `unknown shorthand flag: '3' in -3`},
		{[]string{"tcptop", "1", "x"}, `invalid --count "x": argument 2: must be a whole number from 0`},
		{[]string{"tcptop", "1", "2", "3"}, `accepts at most 2 arg(s), received 3`},
		{[]string{"tcptop", "-r", "2", "1"}, `invalid --interval "2s": given twice: as a flag and as argument "1"`},
		{[]string{"stacktop", "top", "--count", "2", "1", "5"}, `invalid --count "2": given twice: as a flag and as argument "5"`},
		{[]string{"tcptop", "-S", "--format", "json"}, `invalid --nosummary "true": applies to the text format`},
		{[]string{"tcptop", "-4", "-6"}, `invalid --ipv6 "true": cannot be combined with -4/--ipv4`},
		{[]string{"stacktop", "1", "3"}, `unknown command "1" for "stacktop"`}, // positional arguments are top's
	} {
		code, _, stderr := runArgs(c.args...)
		if code != clierr.ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// latency keeps netstacklat's -C (group by cgroup) where top has tcptop's
// -C (do not clear): each command has its own.
func TestShortFlagCMeansWhatEachToolMeant(t *testing.T) {
	for cmd, want := range map[string]string{"top": "noclear", "latency": "group-by-cgroup", "serve": "group-by-cgroup"} {
		c, _, err := newRootCmd().Find([]string{cmd})
		if err != nil {
			t.Fatal(err)
		}
		if f := c.Flags().ShorthandLookup("C"); f == nil || f.Name != want {
			t.Errorf("%s -C is %v, want --%s", cmd, f, want)
		}
	}
	for prog, want := range map[string]string{"tcptop": "noclear", "netstacklat": "group-by-cgroup"} {
		if f := aliases[prog]().Flags().ShorthandLookup("C"); f == nil || f.Name != want {
			t.Errorf("%s -C is %v, want --%s", prog, f, want)
		}
	}
}

// loopbackPair opens a TCP connection to a listener on addr (127.0.0.1:0
// or [::1]:0) and returns the two ends' "local > remote" as stream prints
// them.
func loopbackPair(t *testing.T, addr string) (server, client string) {
	t.Helper()
	ln := testenv.ServeLocalTCP(t, addr, func(c net.Conn) { io.Copy(io.Discard, c) })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	l, r := c.LocalAddr().String(), c.RemoteAddr().String()
	return r + " > " + l, l + " > " + r
}

// localPort is the local port of a "local > remote" of loopbackPair.
func localPort(end string) string {
	local, _, _ := strings.Cut(end, " > ")
	return local[strings.LastIndex(local, ":")+1:]
}

// connLine matches a stream text line's protocol, "local > remote" and state.
var connLine = regexp.MustCompile(`^\S+ (tcp|udp) (\S+ > \S+) (\S+) `)

// TestTcptopHabits runs tcptop as bcc's users type it, over an IPv4 and an
// IPv6 loopback connection: `tcptop -C [-S] [-4|-6] 0.1 2` prints two
// refreshes (the count argument), with a summary line each unless -S, and
// exactly the connections of the family asked for; so does stream -4/-6.
func TestTcptopHabits(t *testing.T) {
	testenv.RequireRoot(t)
	s4, c4 := loopbackPair(t, "127.0.0.1:0")
	s6, c6 := loopbackPair(t, "[::1]:0")
	ports := localPort(s4) + "," + localPort(s6)
	tcptop := func(flags ...string) []string {
		return append(append([]string{"tcptop", "-C", "--port", ports}, flags...), "0.1", "2")
	}
	stream := func(flag string) []string {
		return []string{"stacktop", "stream", flag, "--port", ports, "-r", "0.1", "--count", "2"}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{tcptop(), []string{s4, c4, s6, c6}},
		{tcptop("-4"), []string{s4, c4}},
		{tcptop("--ipv6"), []string{s6, c6}},
		{tcptop("-S", "-6"), []string{s6, c6}},
		{stream("-4"), []string{s4, c4}},
		{stream("-6"), []string{s6, c6}},
	} {
		args := c.args
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		var seen []string
		summaries := 0
		for _, line := range strings.Split(stdout.String(), "\n") {
			if m := connLine.FindStringSubmatch(line); m != nil && m[1] == "tcp" && m[3] != "LISTEN" && !slices.Contains(seen, m[2]) {
				seen = append(seen, m[2])
			}
			if strings.Contains(line, " -- ") && strings.Contains(line, " connections (") {
				summaries++
			}
		}
		slices.Sort(seen)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(seen, want) {
			t.Errorf("%v: connections %q, want %q:\n%s", args, seen, want, stdout.String())
		}
		wantSummaries := 2
		if slices.Contains(args, "-S") {
			wantSummaries = 0
		}
		if summaries != wantSummaries {
			t.Errorf("%v: %d summary lines, want %d:\n%s", args, summaries, wantSummaries, stdout.String())
		}
	}
}

// TestTopNoClearInATerminal: in a terminal, top -C prints refreshes as
// stream does instead of drawing the table, and the count argument ends it.
func TestTopNoClearInATerminal(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "tmux") // before any setup: the matrix guests have none
	// --port 1: no rows, so that the summary lines stay on the screen
	// whatever else the host runs.
	p := startPane(t, 200, 40, "", "top", "-C", "--port", "1", "0.2", "3")
	p.expectExit(0)
	s := p.screen()
	if n := strings.Count(s, " -- 0 connections ("); n != 3 {
		t.Errorf("%d summary lines on the screen, want the 3 refreshes printed:\n%s", n, s)
	}
	if strings.Contains(s, " sort ") {
		t.Errorf("the live table was drawn:\n%s", s)
	}
}

// seriesLabel matches one label of an exposition line.
var seriesLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// TestServeAddressFamily: serve -4 and -6 export the per-connection series
// of exactly the connections of that family.
func TestServeAddressFamily(t *testing.T) {
	testenv.RequireRoot(t)
	s4, c4 := loopbackPair(t, "127.0.0.1:0")
	s6, c6 := loopbackPair(t, "[::1]:0")
	for flag, want := range map[string][]string{"-4": {s4, c4}, "-6": {s6, c6}} {
		url := startServe(t, flag, "--no-collector.latency", "--tcp", "--interval", "100ms",
			"--connections.per-connection-series", "100", "--port", localPort(s4)+","+localPort(s6))
		slices.Sort(want)
		testenv.Eventually(t, 10*time.Second, "serve "+flag+"'s per-connection series", func() error {
			var got []string
			for _, line := range seriesOf(scrape(t, url), "stacktop_connection_received_bytes_total") {
				l := map[string]string{}
				for _, m := range seriesLabel.FindAllStringSubmatch(line, -1) {
					l[m[1]] = m[2]
				}
				if l["remote_port"] != "0" {
					got = append(got, net.JoinHostPort(l["local_addr"], l["local_port"])+" > "+net.JoinHostPort(l["remote_addr"], l["remote_port"]))
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("connections %q, want %q", got, want)
			}
			return nil
		})
	}
}
