// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/testenv"
	"github.com/stacktop/stacktop/internal/testenv/reexec"
)

// The tests run the far end of their traffic as a separate process (this
// test binary re-executed as a helper), so that the two ends of a
// connection have different owners. Parameters come in STC_* variables.
func TestMain(m *testing.M) {
	reexec.Main(m, reexec.Helpers{"tcp": tcpHelper, "hold": holdHelper, "udp": udpHelper, "accept": acceptHelper})
}

func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

// tcpHelper, STC_COUNT times: connects to STC_ADDR, sends STC_SEND bytes,
// reads STC_RECV bytes and closes.
func tcpHelper() error {
	for range max(envInt("STC_COUNT"), 1) {
		c, err := net.Dial("tcp", os.Getenv("STC_ADDR"))
		if err != nil {
			return err
		}
		if _, err := c.Write(make([]byte, envInt("STC_SEND"))); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, make([]byte, envInt("STC_RECV"))); err != nil {
			return err
		}
		if err := c.Close(); err != nil {
			return err
		}
	}
	return nil
}

// holdHelper connects to STC_ADDR, prints the local port and sends what
// arrives on stdin until it closes.
func holdHelper() error {
	c, err := net.Dial("tcp", os.Getenv("STC_ADDR"))
	if err != nil {
		return err
	}
	fmt.Println(c.LocalAddr().(*net.TCPAddr).Port)
	if _, err := io.Copy(c, os.Stdin); err != nil {
		return err
	}
	return c.Close()
}

// acceptHelper accepts one connection on the listener it inherits as fd 3
// (a pre-forked worker's), prints the peer's port and holds the connection
// until stdin closes.
func acceptHelper() error {
	l, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		return err
	}
	c, err := l.Accept()
	if err != nil {
		return err
	}
	fmt.Println(c.RemoteAddr().(*net.TCPAddr).Port)
	_, err = io.Copy(io.Discard, os.Stdin)
	return errors.Join(err, c.Close())
}

// udpHelper, from STC_COUNT sockets, sends two STC_SEND-byte datagrams each
// to STC_ADDR and reads two replies.
func udpHelper() error {
	for range envInt("STC_COUNT") {
		c, err := net.Dial("udp", os.Getenv("STC_ADDR"))
		if err != nil {
			return err
		}
		buf := make([]byte, 65536)
		for range 2 {
			if _, err := c.Write(make([]byte, envInt("STC_SEND"))); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Read(buf); err != nil {
				return err
			}
		}
		c.Close()
	}
	return nil
}

// helperComm is the helpers' process name (reexec.CommandAs), so their
// comm differs from the test's.
const helperComm = "stc-helper"

// runHelperProc runs a helper to completion and returns its pid.
func runHelperProc(t *testing.T, mode string, env ...string) int {
	t.Helper()
	cmd := reexec.CommandAs(t, helperComm, mode, env...)
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper %s: %v", mode, err)
	}
	return cmd.Process.Pid
}

// holdConnection starts a hold helper (with attr, when not nil) and returns
// it with its local port and the pipe to what it sends.
func holdConnection(t *testing.T, addr string, attr *syscall.SysProcAttr) (*exec.Cmd, int, io.Writer) {
	t.Helper()
	cmd := reexec.CommandAs(t, helperComm, "hold", "STC_ADDR="+addr)
	cmd.SysProcAttr = attr
	stdin, port := startPortHelper(t, cmd)
	return cmd, port, stdin
}

// startPortHelper starts a helper that prints a port once its connection
// is up and holds it until its stdin closes (at the test's end, or when
// the caller closes the pipe it returns), and returns that port.
func startPortHelper(t *testing.T, cmd *exec.Cmd) (io.WriteCloser, int) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper printed %q", line)
	}
	return stdin, port
}

// tcpServer listens on addr inside the peer's namespace. Each accepted
// connection reads exactly recv bytes, writes send bytes, reads until EOF
// and closes.
func tcpServer(t *testing.T, p *testenv.Peer, addr string, recv, send int) *net.TCPListener {
	t.Helper()
	return p.ServeTCP(t, addr, func(c net.Conn) {
		if _, err := io.ReadFull(c, make([]byte, recv)); err != nil {
			return
		}
		if _, err := c.Write(make([]byte, send)); err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, c)
	})
}

// udpServer answers every datagram received on an unconnected socket in the
// peer's namespace with reply bytes, and returns its port.
func udpServer(t *testing.T, p *testenv.Peer, reply int) uint16 {
	t.Helper()
	var srv net.PacketConn
	if err := p.Do(func() (err error) { srv, err = net.ListenPacket("udp", addrPort(p.PeerIP4, 0)); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			_, from, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = srv.WriteTo(make([]byte, reply), from)
		}
	}()
	return uint16(srv.LocalAddr().(*net.UDPAddr).Port)
}

func openTracker(t *testing.T, cfg Config) *Tracker {
	t.Helper()
	testenv.RequireRoot(t)
	start := time.Now()
	// A forced backend chooses the UDP hooks' programs; the others have
	// one implementation, which runs whatever is forced.
	cfg.Backend = testenv.Backend(t)
	tr, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Logf("Open took %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		// A tracing program the kernel skips because it is already running
		// on that CPU (preempted) misses an event: say so, it explains
		// bytes that are missing.
		for _, a := range tr.engine.Attached() {
			if s, err := a.Program.Stats(); err == nil && s.RecursionMisses > 0 {
				t.Logf("program %v missed %d runs", a.Program, s.RecursionMisses)
			}
		}
		tr.Close()
	})
	return tr
}

// history accumulates snapshots: closed records are reported only once.
// pollClosed polls until n client and n server ends have closed records. In
// an emulated guest, once a loss has been counted, it gives up 30 snapshots
// (3 s) in: the missing ones may never come (see testenv.RequireExact).
func pollClosed(t *testing.T, tr *Tracker, n int, isClient, isServer func(*conn.Record) bool) *history {
	t.Helper()
	const settle = 30
	return poll(t, tr, func(h *history) bool {
		complete := len(find(h.closed, isClient)) >= n && len(find(h.closed, isServer)) >= n
		return complete || (testenv.InGuest() && h.last.Lost > 0 && h.snapshots >= settle)
	})
}

type history struct {
	last      conn.Snapshot
	closed    []conn.Record
	seen      []conn.Record // every record of every snapshot
	snapshots int
}

// poll takes a snapshot every 100ms until done returns true or 10s pass
// (20s in an emulated guest, where the churn tests' thousand connections
// take up to 8s).
func poll(t *testing.T, tr *Tracker, done func(*history) bool) *history {
	t.Helper()
	h := &history{}
	limit := 10 * time.Second
	if testenv.InGuest() {
		limit *= 2
	}
	deadline := time.Now().Add(limit)
	for {
		s, err := tr.Snapshot()
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		h.last = s
		h.snapshots++
		for _, r := range s.Records {
			// The kernel's tables are read while programs write them: an
			// entry caught before its socket's details were filled in
			// would hide its connection for a refresh.
			if r.Proto == "tcp" && r.State == stateName(0) {
				t.Errorf("half-built entry in a snapshot: %+v", r)
			}
			h.seen = append(h.seen, r)
			if r.Event == conn.Closed {
				h.closed = append(h.closed, r)
			}
		}
		if done(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v (lost %d, map full %d); last snapshot:\n%s", limit, s.Lost, s.MapFull, dump(s.Records))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func dump(rs []conn.Record) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %+v\n", r)
	}
	return b.String()
}

func procComm(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
