// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/output"
	"github.com/stacktop/stacktop/internal/testenv"
)

func TestStreamUsageErrors(t *testing.T) {
	otherLog := filepath.Join(t.TempDir(), "other.csv")
	fifo := filepath.Join(t.TempDir(), "log.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(otherLog, []byte("time,value\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"stream", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"stream", "--port", "70000"}, `invalid --port "70000"`},
		{[]string{"stream", "--port", "0"}, `invalid --port "0"`},
		{[]string{"stream", "--port", "http"}, `invalid --port "http": must be between 1 and 65535`},
		{[]string{"stream", "--port", "80,0"}, `invalid --port "0"`},
		{[]string{"stream", "--process", "(oops"}, `invalid --process "(oops"`},
		{[]string{"stream", "--cgroup", "/stc-no-such-cgroup"}, `invalid --cgroup "/stc-no-such-cgroup"`},
		{[]string{"stream", "--interval", "-1"}, `invalid argument "-1" for "-r, --interval" flag: must be from 0.01 to 86400 seconds`},
		{[]string{"top", "--interval", "1e300"}, `invalid argument "1e300" for "-r, --interval" flag: must be from 0.01 to 86400 seconds`},
		{[]string{"stream", "--count", "-2"}, `invalid argument "-2" for "--count" flag: must be a whole number from 0`},
		{[]string{"stream", "--udp-idle", "0s"}, `invalid argument "0s" for "--udp-idle" flag: must be from 0.001 to 86400 seconds`},
		{[]string{"stream", "--duration", "soon"}, `invalid argument "soon" for "--duration" flag: not a number of seconds or a duration`},
		{[]string{"stream", "-4", "-6"}, `invalid --ipv6 "true": cannot be combined with -4/--ipv4`},
		{[]string{"stream", "--netns", "stc-no-such-netns"}, `invalid --netns "stc-no-such-netns"`},
		{[]string{"stream", "--interface", "stcnone0"}, `invalid --interface "stcnone0"`},
		{[]string{"stream", "--format", "xml"}, `invalid --format "xml"`},
		{[]string{"stream", "--backend", "kprobe"}, `invalid --backend "kprobe"`},
		{[]string{"stream", "--pid", "-3"}, `invalid --pid "-3"`},
		{[]string{"stream", "--pid", "999999999"}, `invalid --pid "999999999": must be a process id from 1 to 4194304`},
		{[]string{"stream", "--netns", otherLog}, `invalid --netns "` + otherLog + `": not a namespace`}, // any regular file, as /etc/passwd
		{[]string{"stream", "--netns", "/proc/self/ns/mnt"}, `invalid --netns "/proc/self/ns/mnt": a namespace, but not a network namespace`},
		{[]string{"stream", "--netns", "12345"}, `invalid --netns "12345": no network namespace with this inode is alive`},
		{[]string{"stream", "-n", "-2"}, `invalid --netns "-2"`},
		{[]string{"stream", "--max-tracked", "0"}, `invalid argument "0" for "--max-tracked" flag: must be a whole number from 1 to 4194304`},
		{[]string{"stream", "--max-tracked", "-1"}, `invalid argument "-1" for "--max-tracked" flag`},
		{[]string{"stream", "--max-connections", "lots"}, `invalid argument "lots" for "--max-tracked" flag`}, // the old spelling
		{[]string{"stream", "--max-connections", "4194305"}, `invalid argument "4194305" for "--max-tracked" flag`},
		{[]string{"top", "--max-tracked", "99999999999"}, `invalid argument "99999999999" for "--max-tracked" flag`},
		{[]string{"top", "--max-tracked", "1e99"}, `invalid argument "1e99" for "--max-tracked" flag`},
		{[]string{"stream", "--log", otherLog}, `invalid --log "` + otherLog + `"`},
		{[]string{"stream", "--log", fifo}, `invalid --log "` + fifo + `": not a regular file (it is a FIFO)`},
		{[]string{"top", "--port", "65536"}, `invalid --port "65536"`},
		{[]string{"--process", "["}, `invalid --process "["`},
		{[]string{"stream", "--read-wait=maybe"}, `invalid argument "maybe" for "--read-wait" flag`},
		{[]string{"top", "--sort", "read-wait"}, `invalid --sort "read-wait": sorts by read wait, which needs --read-wait`},
		{[]string{"top", "--read-wait", "--sort", "read-wait:up"}, `invalid --sort "read-wait:up": direction must be asc or desc`},
	}
	for _, c := range cases {
		code, _, stderr := runArgs(append([]string{"stacktop"}, c.args...)...)
		if code != clierr.ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
	if b, _ := os.ReadFile(otherLog); string(b) != "time,value\n1,2\n" {
		t.Errorf("a refused --log file was modified: %q", b)
	}
}

// TestStreamForcedBackend: --backend chooses the UDP hooks' programs;
// tracepoint (cgroup_skb) runs on every kernel, fentry where the kernel
// allows fentry programs and otherwise stops, naming the hook.
func TestStreamForcedBackend(t *testing.T) {
	testenv.RequireRoot(t)
	for _, backend := range []features.Backend{features.FentryBE, features.Tracepoint} {
		t.Run(string(backend), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"stacktop", "stream", "--backend", string(backend),
				"--count", "1", "--interval", "100ms", "--port", "1"}, &stdout, &stderr)
			// fentry chooses the UDP hooks' programs: a kernel that
			// refuses fentry programs (this CI host) must say so and stop.
			refused := backend == features.FentryBE && !features.Check(features.Fentry).OK
			switch {
			case refused && (code != 1 || !strings.Contains(stderr.String(), "udp-ingress") ||
				!strings.Contains(stderr.String(), "no backend could attach")):
				t.Errorf("fentry refused by this kernel: exit %d, want 1 naming the hook udp-ingress; stderr: %s",
					code, stderr.String())
			case !refused && code != 0:
				t.Errorf("exit %d, want 0; stderr: %s", code, stderr.String())
			}
		})
	}
}

// traffic holds a TCP connection (opened before stacktop starts, so it is
// listed as partial) and, a little after start, moves data over a second
// connection and closes it; everything uses one server port.
type traffic struct {
	peer *testenv.Peer
	port int
	held net.Conn
}

func newTraffic(t *testing.T, name string, subnet int) *traffic {
	t.Helper()
	p := testenv.NewPeer(t, name, subnet)
	// Echo through read(2)/write(2): io.Copy between two TCP connections
	// would splice(2), whose reads sock_recv_length does not see
	// (docs/CONNECTIONS.md, blind spots).
	l := p.ServeTCP(t, net.JoinHostPort(p.PeerIP4.String(), "0"), func(c net.Conn) {
		_, _ = io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, make([]byte, 4096))
	})
	tr := &traffic{peer: p, port: l.Addr().(*net.TCPAddr).Port}
	var err error
	if tr.held, err = net.Dial("tcp", tr.addr()); err != nil {
		t.Fatalf("%v (%s)", err, p.Diagnose())
	}
	t.Cleanup(func() { tr.held.Close() })
	return tr
}

func (tr *traffic) addr() string {
	return net.JoinHostPort(tr.peer.PeerIP4.String(), strconv.Itoa(tr.port))
}

// exchange sends 4000 bytes, reads the echo and closes.
func (tr *traffic) exchange(t *testing.T) {
	c, err := net.Dial("tcp", tr.addr())
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	if _, err := c.Write(make([]byte, 4000)); err != nil {
		t.Error(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 4000)); err != nil {
		t.Error(err)
	}
}

// firstWrite is a buffer that signals when stacktop has written its first
// refresh, i.e. when its hooks are surely attached.
type firstWrite struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	started chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() == 0 {
		close(w.started)
	}
	return w.buf.Write(p)
}

// streamRun runs stacktop in-process and makes an exchange after its first
// refresh.
func streamRun(t *testing.T, tr *traffic, args ...string) string {
	t.Helper()
	return streamRunWith(t, tr.exchange, args...)
}

// streamRunWith runs stacktop in-process and calls traffic after its first
// refresh.
func streamRunWith(t *testing.T, traffic func(*testing.T), args ...string) string {
	t.Helper()
	out := &firstWrite{started: make(chan struct{})}
	var stderr bytes.Buffer
	go func() {
		<-out.started
		traffic(t)
	}()
	backend := testenv.Backend(t)
	args = append(args, "--backend", string(backend))
	code := run(context.Background(), append([]string{"stacktop"}, args...), out, &stderr)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	return out.buf.String()
}

func TestStreamFormats(t *testing.T) {
	testenv.RequireRoot(t)
	tr := newTraffic(t, "stc-fmt", 57)
	port := strconv.Itoa(tr.port)
	// Four refreshes: the exchange starts after the first and has three to
	// close in, plenty even on a loaded machine.
	const refreshes = 4
	common := []string{"--count", strconv.Itoa(refreshes), "--interval", "400ms", "--port", port}

	t.Run("json", func(t *testing.T) {
		out := streamRun(t, tr, append([]string{"stream", "--format", "json"}, common...)...)
		var summaries, partial, closed int
		var lost uint64
		s := bufio.NewScanner(strings.NewReader(out))
		for s.Scan() {
			var probe struct{ Event string }
			if err := json.Unmarshal(s.Bytes(), &probe); err != nil {
				t.Fatalf("line %q: %v", s.Text(), err)
			}
			if probe.Event == "summary" {
				var sum output.Summary
				if err := json.Unmarshal(s.Bytes(), &sum); err != nil || sum.MapFull != 0 {
					t.Errorf("summary %q: %v", s.Text(), err)
				}
				lost = max(lost, sum.Lost) // cumulative
				summaries++
				continue
			}
			var r conn.Record
			if err := json.Unmarshal(s.Bytes(), &r); err != nil {
				t.Fatalf("record %q: %v", s.Text(), err)
			}
			if r.LocalPort != uint16(tr.port) && r.RemotePort != uint16(tr.port) {
				t.Errorf("--port %s let through %q", port, s.Text())
			}
			if r.Partial && r.Event == conn.New {
				partial++
			}
			if r.Event == conn.Closed && r.BytesOut == 4000 && r.BytesIn == 4000 {
				closed++
			}
		}
		// Partial from the start: the held connection's two ends and the
		// listener (in the peer namespace).
		if summaries != refreshes || partial != 3 {
			t.Errorf("%d summaries, %d new partial; want %d, 3:\n%s", summaries, partial, refreshes, out)
		}
		// Both ends of the exchanged connection close with exact totals
		// (in an emulated guest, see testenv.RequireExact).
		var wrong []string
		for i := closed; i < 2; i++ {
			wrong = append(wrong, fmt.Sprintf("end %d of 2 not closed with 4000/4000 bytes", i+1))
		}
		if closed > 2 {
			t.Errorf("%d ends closed with 4000/4000 bytes, want 2", closed)
		}
		if len(wrong) > 0 || closed > 2 {
			t.Logf("output:\n%s", out)
		}
		testenv.RequireExact(t, wrong, lost)
	})

	t.Run("csv", func(t *testing.T) {
		out := streamRun(t, tr, append([]string{"stream", "--format", "csv"}, common...)...)
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatalf("CSV does not parse: %v\n%s", err, out)
		}
		if !slices.Equal(rows[0], output.Header) {
			t.Fatalf("header %v, want %v", rows[0], output.Header)
		}
		checkCSVRows(t, rows[1:], refreshes)
	})

	t.Run("text", func(t *testing.T) {
		out := streamRun(t, tr, append([]string{"stream"}, common...)...)
		for _, want := range []string{"[PARTIAL]", "[NEW]", "[CLOSED]", "ESTABLISHED", "in 3.9KiB", "lost events: 0, map full: 0"} {
			if !strings.Contains(out, want) {
				t.Errorf("text output lacks %q:\n%s", want, out)
			}
		}
		if n := strings.Count(out, "lost events:"); n != refreshes {
			t.Errorf("%d footers, want %d", n, refreshes)
		}
	})

	// top on a pipe, and stacktop without a command, behave like stream.
	for _, args := range [][]string{{"top"}, {}} {
		out := streamRun(t, tr, append(args, append([]string{"--format", "csv"}, common...)...)...)
		if !strings.HasPrefix(out, strings.Join(output.Header, ",")+"\n") {
			t.Errorf("%v on a pipe: output does not start with the CSV header:\n%s", args, out)
		}
	}
}

// checkCSVRows checks that rows of one refresh share their timestamp, which
// is RFC 3339, and that the connection's fields parse.
func checkCSVRows(t *testing.T, rows [][]string, refreshes int) {
	t.Helper()
	col := func(name string) int { return slices.Index(output.Header, name) }
	ticks := map[string]bool{}
	for _, row := range rows {
		if len(row) != len(output.Header) {
			t.Fatalf("row %v has %d fields", row, len(row))
		}
		if _, err := time.Parse(time.RFC3339, row[col("ts")]); err != nil {
			t.Errorf("ts %q: %v", row[col("ts")], err)
		}
		ticks[row[col("ts")]] = true
		for _, name := range []string{"bytes_in", "bytes_out", "pid", "local_port", "lost", "map_full"} {
			if _, err := strconv.ParseUint(row[col(name)], 10, 64); err != nil {
				t.Errorf("%s %q: %v", name, row[col(name)], err)
			}
		}
	}
	if len(rows) == 0 || len(ticks) > refreshes {
		t.Errorf("%d rows over %d distinct timestamps; want rows from at most %d refreshes", len(rows), len(ticks), refreshes)
	}
}

func TestStreamLogAppends(t *testing.T) {
	testenv.RequireRoot(t)
	tr := newTraffic(t, "stc-log", 58)
	log := filepath.Join(t.TempDir(), "conns.csv")
	args := []string{"stream", "--count", "1", "--interval", "300ms", "--port", strconv.Itoa(tr.port), "--log", log}
	streamRun(t, tr, args...)
	first, _ := os.ReadFile(log)
	streamRun(t, tr, args...)
	second, _ := os.ReadFile(log)
	if !bytes.HasPrefix(second, first) || len(second) == len(first) {
		t.Fatalf("second run did not append:\nfirst:\n%s\nsecond:\n%s", first, second)
	}
	rows, err := csv.NewReader(bytes.NewReader(second)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rows[0], output.Header) {
		t.Fatalf("log header %v", rows[0])
	}
	for _, row := range rows[1:] {
		if row[0] == "ts" {
			t.Fatalf("header repeated in an appended log:\n%s", second)
		}
	}
	checkCSVRows(t, rows[1:], 2)
}

// TestStreamMapFull: --max-tracked 16 with 64 connections opened during
// the run (128 sockets on this host) shows the overflow in the JSON summary
// and the text footer; the default capacity shows none for the same traffic.
func TestStreamMapFull(t *testing.T) {
	testenv.RequireRoot(t)
	const conns = 64
	p := testenv.NewPeer(t, "stk-capst", 241)
	l := p.ServeTCP(t, net.JoinHostPort(p.PeerIP4.String(), "0"), func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c)
	})
	addr := l.Addr().String()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	// open makes the connections, writes one byte on each and holds them
	// until the subtest ends.
	open := func(t *testing.T) {
		for range conns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { c.Close() })
			if _, err := c.Write([]byte{1}); err != nil {
				t.Error(err)
			}
		}
	}
	common := []string{"stream", "--count", "4", "--interval", "400ms", "--port", port}
	// Every socket that found the table full is counted at least once.
	const atLeast = 2*conns - 16

	summaries := func(t *testing.T, out string) (last output.Summary, records []conn.Record) {
		s := bufio.NewScanner(strings.NewReader(out))
		for s.Scan() {
			var probe struct{ Event string }
			if err := json.Unmarshal(s.Bytes(), &probe); err != nil {
				t.Fatalf("line %q: %v", s.Text(), err)
			}
			if probe.Event == "summary" {
				if err := json.Unmarshal(s.Bytes(), &last); err != nil {
					t.Fatal(err)
				}
				continue
			}
			var r conn.Record
			if err := json.Unmarshal(s.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			records = append(records, r)
		}
		return last, records
	}

	t.Run("json-tiny", func(t *testing.T) {
		out := streamRunWith(t, open, append(common, "--format", "json", "--max-tracked", "16")...)
		last, _ := summaries(t, out)
		if last.MapFull < atLeast {
			t.Errorf("last summary map_full %d, want at least %d:\n%s", last.MapFull, atLeast, out)
		}
	})

	t.Run("text-tiny", func(t *testing.T) {
		// The old spelling of --max-tracked still works.
		out := streamRunWith(t, open, append(common, "--max-connections", "16")...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		footer := lines[len(lines)-1]
		i := strings.LastIndex(footer, "map full: ")
		if i < 0 {
			t.Fatalf("last line is not a footer:\n%s", out)
		}
		n, err := strconv.Atoi(footer[i+len("map full: "):])
		if err != nil || n < atLeast {
			t.Errorf("footer %q: map full %d (%v), want at least %d", footer, n, err, atLeast)
		}
	})

	t.Run("json-default", func(t *testing.T) {
		out := streamRunWith(t, open, append(common, "--format", "json")...)
		last, records := summaries(t, out)
		seen := map[[2]uint16]bool{}
		for _, r := range records {
			if r.State != "LISTEN" {
				seen[[2]uint16{r.LocalPort, r.RemotePort}] = true
			}
		}
		if last.MapFull != 0 || len(seen) != 2*conns {
			t.Errorf("map_full %d and %d of our sockets seen; want 0 and %d:\n%s", last.MapFull, len(seen), 2*conns, out)
		}
	})
}
