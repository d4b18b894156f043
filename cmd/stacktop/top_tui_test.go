// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestTopUnderTmux drives the real binary in a real terminal: stacktop top
// runs in a tmux pane of fixed size while this process moves bytes over a
// TCP connection to a server in a peer network namespace. The screen, read
// with capture-pane, must show the connection with this process's name;
// typing / and the server's port must leave that row alone; a resize must
// lay the table out again; q must exit 0 and give the terminal back (no
// alternate screen, cursor visible). Meanwhile --log keeps writing every
// refresh, paused or not, and --sort chose the initial order.
func TestTopUnderTmux(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "tmux") // before any setup: the matrix guests have none
	port := serveInPeer(t)
	comm := ownComm(t)
	logFile := filepath.Join(t.TempDir(), "conns.csv")
	// --netns: only this namespace, so the server's end of the connection
	// (in the peer namespace) does not appear as a second row.
	pane := startPane(t, 160, 40, "", "top", "--interval", "300ms", "--netns", ownNetns(t),
		"--sort", "remote:asc", "--log", logFile)

	portText := strconv.Itoa(port)
	ours := func(row string) bool { return strings.Contains(row, ":"+portText) && strings.Contains(row, comm) }
	pane.await("the connection's row with its process name", func(s string) bool {
		for _, row := range tableRows(s) {
			if ours(row) {
				return true
			}
		}
		return false
	})

	pane.keys("/")
	pane.keys("-l", portText)
	s := pane.await("the filter to leave one row", func(s string) bool {
		rows := tableRows(s)
		return strings.Contains(s, "filter: "+portText) && len(rows) == 1 && ours(rows[0])
	})
	if !strings.Contains(s, "1 connections") || !strings.Contains(s, "sort Remote ▲") {
		t.Errorf("status bar does not show the --sort order and the one remaining row:\n%s", s)
	}

	// Paused, the screen stands still while --log goes on receiving refreshes.
	pane.keys("Enter") // keep the filter, stop typing
	pane.keys("Space")
	waiting := regexp.MustCompile(`PAUSED \((\d+) refresh(es)? waiting\)`)
	unseen := func(s string) int {
		m := waiting.FindStringSubmatch(s)
		if m == nil {
			return -1
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	var first int
	pane.await("the paused status", func(s string) bool { first = unseen(s); return first >= 1 })
	// The collector writes --log before it updates the screen, so by now the
	// log may already hold the refresh after the one on screen: wait for
	// three more on screen to be sure of two more in the log.
	before := logRows(t, logFile, port)
	pane.await("three more refreshes while paused", func(s string) bool { return unseen(s) >= first+3 })
	if after := logRows(t, logFile, port); after < before+2 {
		t.Errorf("--log got %d rows of the connection before, %d after two paused refreshes", before, after)
	}
	pane.keys("Space")

	// A narrower terminal gets a new layout at once: fewer columns, no line
	// longer than the terminal, and the row still there (its process name
	// may now end in an ellipsis).
	pane.tmux("resize-window", "-t", pane.name, "-x", "70", "-y", "20")
	pane.await("the layout for 70 columns", func(s string) bool {
		rows := tableRows(s)
		for _, line := range strings.Split(s, "\n") {
			if utf8.RuneCountInString(strings.TrimRight(line, " ")) > 70 {
				return false
			}
		}
		return len(rows) == 1 && strings.Contains(rows[0], ":"+portText) && !strings.Contains(s, " Proto ")
	})

	pane.keys("q")
	pane.expectExit(0)
	if state := pane.tmux("display-message", "-p", "-t", pane.name, "#{alternate_on} #{cursor_flag}"); strings.TrimSpace(state) != "0 1" {
		t.Errorf("terminal not restored after q: alternate screen, cursor visible = %q, want \"0 1\"", state)
	}
	if after := pane.screen(); strings.Contains(after, "? help") {
		t.Errorf("the table is still on screen after q:\n%s", after)
	}
}

// TestTopWithoutColourUnderTmux: with NO_COLOR the table keeps bold, reverse
// and faint but writes no colour; on a dumb terminal it writes no attribute
// at all; both still show the table and quit on q.
func TestTopWithoutColourUnderTmux(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "tmux") // before any setup: the matrix guests have none
	colour := regexp.MustCompile(`\x1b\[[0-9;]*(3[0-8]|4[0-8]|9[0-7]|10[0-7])[;m]`)
	attribute := regexp.MustCompile(`\x1b\[[0-9;]*m`)
	for _, tc := range []struct {
		env       string
		forbidden *regexp.Regexp
	}{
		{"NO_COLOR=1", colour},
		{"TERM=dumb", attribute},
		{"TERM=xterm-256color", nil}, // the same check sees colour when it is allowed
	} {
		t.Run(tc.env, func(t *testing.T) {
			pane := startPane(t, 120, 30, tc.env, "top", "--interval", "300ms")
			s := pane.await("the table", func(s string) bool { return strings.Contains(s, " sort Rate In ▼") })
			if !strings.Contains(s, " Local ") || !strings.Contains(s, "TCP ") {
				t.Fatalf("table incomplete:\n%s", s)
			}
			styled := pane.tmux("capture-pane", "-p", "-e", "-t", pane.name)
			switch {
			case tc.forbidden != nil && tc.forbidden.MatchString(styled):
				t.Errorf("%s: screen has %q", tc.env, tc.forbidden.FindString(styled))
			case tc.forbidden == nil && !colour.MatchString(styled):
				t.Errorf("%s: no colour on screen; the check would not see it", tc.env)
			}
			pane.keys("q")
			pane.expectExit(0)
		})
	}
}

// TestTopSortFlag: a bad --sort is bad usage (exit 2, naming the flag and
// the value), found before privileges or the kernel are looked at, for top,
// the bare command and tcptop alike.
func TestTopSortFlag(t *testing.T) {
	for _, args := range [][]string{
		{"stacktop", "top", "--sort", "speed"},
		{"stacktop", "--sort", "speed"},
		{"tcptop", "--sort", "speed"},
	} {
		code, _, stderr := runArgs(args...)
		if code != clierr.ExitUsage || !strings.HasPrefix(stderr, `error: invalid --sort "speed": unknown column; one of proto, local,`) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming --sort and its value", args, code, stderr)
		}
	}
	code, _, stderr := runArgs("stacktop", "top", "--sort", "rtt:up")
	if code != clierr.ExitUsage || !strings.Contains(stderr, `invalid --sort "rtt:up": direction must be asc or desc`) {
		t.Errorf("--sort rtt:up: exit %d, stderr %q", code, stderr)
	}
}

// TestTopSIGTERMRestoresTerminal: a service manager's SIGTERM ends the
// table like q does: exit 0, terminal restored.
func TestTopSIGTERMRestoresTerminal(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "tmux") // before any setup: the matrix guests have none
	pane := startPane(t, 100, 20, "", "top", "--interval", "300ms")
	pane.await("the table", func(s string) bool { return strings.Contains(s, " sort Rate In ▼") })
	shell := strings.TrimSpace(pane.tmux("display-message", "-p", "-t", pane.name, "#{pane_pid}"))
	children, err := os.ReadFile(fmt.Sprintf("/proc/%s/task/%s/children", shell, shell))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(children)))
	if err != nil {
		t.Fatalf("stacktop's pid among the shell's children %q: %v", children, err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	pane.expectExit(0)
	if state := pane.tmux("display-message", "-p", "-t", pane.name, "#{alternate_on} #{cursor_flag}"); strings.TrimSpace(state) != "0 1" {
		t.Errorf("terminal not restored after SIGTERM: alternate screen, cursor visible = %q, want \"0 1\"", state)
	}
}

// pane is stacktop running in a tmux session of fixed size, on a tmux
// server of its own (a new session on a shared server can race with that
// server exiting after the previous test's session closed).
type pane struct {
	t        *testing.T
	tmuxPath string
	name     string // session name, and the name of its server's socket
	exitFile string
}

// startPane runs the stacktop binary with args in a new tmux session of
// w×h cells, with env ("NAME=value" or "") set for it.
func startPane(t *testing.T, w, h int, env string, args ...string) *pane {
	t.Helper()
	p := &pane{t: t, tmuxPath: testenv.RequireTool(t, "tmux"), name: fmt.Sprintf("stt-tui-%d-%d", os.Getpid(), time.Now().UnixNano()),
		exitFile: filepath.Join(t.TempDir(), "exit")}
	// The shell stays after stacktop exits, so its exit status and the
	// restored terminal can be read.
	script := fmt.Sprintf("%s %s %s; echo $? > %s; exec sleep 600", env, testenv.Binary(t), strings.Join(args, " "), p.exitFile)
	p.tmux("new-session", "-d", "-s", p.name, "-x", strconv.Itoa(w), "-y", strconv.Itoa(h), "sh", "-c", script)
	t.Cleanup(func() { exec.Command(p.tmuxPath, "-L", p.name, "kill-server").Run() })
	return p
}

func (p *pane) tmux(args ...string) string {
	p.t.Helper()
	out, err := exec.Command(p.tmuxPath, append([]string{"-L", p.name}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

func (p *pane) screen() string { return p.tmux("capture-pane", "-p", "-t", p.name) }

func (p *pane) keys(keys ...string) {
	p.tmux(append([]string{"send-keys", "-t", p.name}, keys...)...)
}

// await polls the screen until ok accepts it, and returns that screen.
func (p *pane) await(what string, ok func(string) bool) string {
	p.t.Helper()
	var s string
	testenv.Eventually(p.t, 20*time.Second, what, func() error {
		if s = p.screen(); !ok(s) {
			return fmt.Errorf("screen:\n%s", s)
		}
		return nil
	})
	return s
}

func (p *pane) expectExit(want int) {
	p.t.Helper()
	var got []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if b, err := os.ReadFile(p.exitFile); err == nil && len(b) > 0 {
			got = b
			break
		}
	}
	if strings.TrimSpace(string(got)) != strconv.Itoa(want) {
		p.t.Fatalf("exit status %q, want %d; screen:\n%s", got, want, p.screen())
	}
}

// serveInPeer starts a TCP server in a peer network namespace, connects to
// it from this process and keeps sending until the test ends. It returns
// the server's port.
func serveInPeer(t *testing.T) int {
	t.Helper()
	peer := testenv.NewPeer(t, "stt-tui", 131)
	ln := peer.ServeTCP(t, "198.18.131.2:0", func(c net.Conn) { io.Copy(io.Discard, c) })
	keepSending(t, ln.Addr().String(), 64<<10)
	return ln.Addr().(*net.TCPAddr).Port
}

// keepSending connects to addr and writes size bytes every 20 ms until the
// test ends.
func keepSending(t *testing.T, addr string, size int) {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); c.Close() })
	go func() {
		chunk := make([]byte, size)
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}
	}()
}

// logRows counts the CSV log's rows for connections to port.
func logRows(t *testing.T, path string, port int) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), ","+strconv.Itoa(port)+",")
}

func ownComm(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func ownNetns(t *testing.T) string {
	var ns syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &ns); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatUint(ns.Ino, 10)
}

// tableRows returns the lines between the column header and the status bar.
func tableRows(screen string) []string {
	var rows []string
	inTable := false
	for _, line := range strings.Split(screen, "\n") {
		switch {
		case strings.Contains(line, " Local ") && strings.Contains(line, " Remote"):
			inTable = true
		case strings.HasPrefix(line, " sort "):
			return rows
		case inTable && strings.TrimSpace(line) != "":
			rows = append(rows, line)
		}
	}
	return rows
}
