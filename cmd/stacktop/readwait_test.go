// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
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

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/testenv"
	"github.com/stacktop/stacktop/internal/testenv/reexec"
)

// The late reader: a process of its own (so that its reads are the only
// ones under its name) that reads what a peer sends, late.
const (
	lateReaderComm = "stc-latereader"
	lateAddrEnv    = "STC_LATE_ADDR"
	lateMessages   = 5
	lateDelay      = 150 * time.Millisecond
)

// lateReader waits for a line on stdin, connects to STC_LATE_ADDR, waits
// until all lateMessages 100-byte messages are queued (on a slow machine
// the server's writes come late), and reads them in reads of at most one,
// sleeping lateDelay before each: the data of every read waited at least
// that long. It prints its local port first and the number of reads that
// returned data last.
func lateReader() error {
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	c, err := net.Dial("tcp", os.Getenv(lateAddrEnv))
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println(c.LocalAddr().(*net.TCPAddr).Port)
	buf := make([]byte, 100)
	if err := waitQueued(c.(*net.TCPConn), lateMessages*len(buf)); err != nil {
		return err
	}
	reads := 0
	for got := 0; got < lateMessages*len(buf); {
		time.Sleep(lateDelay)
		n, err := c.Read(buf)
		if n > 0 {
			reads++
		}
		got += n
		if err != nil {
			return err
		}
	}
	fmt.Println(reads)
	return nil
}

// waitQueued waits until c has n bytes to read (SIOCINQ), for up to 30 s.
func waitQueued(c *net.TCPConn, n int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var queued int
		var ierr error
		if err := raw.Control(func(fd uintptr) { queued, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
			return err
		}
		if ierr != nil {
			return fmt.Errorf("SIOCINQ: %w", ierr)
		}
		if queued >= n {
			return nil
		}
	}
	return fmt.Errorf("%d bytes not queued within 30s", n)
}

// lateTraffic serves, from a peer namespace, lateMessages messages 10 ms
// apart to each connection, and starts the late reader, waiting; it returns
// the server's port and a function that lets the reader run and returns its
// reads. The reader is started first: a process forked while stacktop (in
// this process, for serve) holds sockets would hold them too until it
// execs, and could become the owner of one it closes last (docs/CONNECTIONS.md,
// Owners), adding that socket's reads to its own.
func lateTraffic(t *testing.T, p *testenv.Peer) (serverPort int, run func() (reads uint64)) {
	t.Helper()
	l := p.ServeTCP(t, net.JoinHostPort(p.PeerIP4.String(), "0"), func(c net.Conn) {
		for range lateMessages {
			if _, err := c.Write(make([]byte, 100)); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		_, _ = io.Copy(io.Discard, c) // until the reader closes
	})
	serverPort = l.Addr().(*net.TCPAddr).Port
	cmd := reexec.CommandAs(t, lateReaderComm, "late-reader", lateAddrEnv+"="+l.Addr().String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return serverPort, func() uint64 {
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("late reader: %v", err)
		}
		out := stdout.String()
		lines := strings.Fields(string(out))
		if len(lines) != 2 {
			t.Fatalf("late reader printed %q", out)
		}
		reads, err := strconv.ParseUint(lines[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return reads
	}
}

// latencyProgramNames are the names (as the kernel keeps them: 15 bytes)
// of every program of the latency object.
func latencyProgramNames() map[string]bool {
	names := map[string]bool{}
	for _, h := range latency.Hooks {
		for _, b := range []features.Backend{features.FentryBE, features.Tracepoint} {
			for _, p := range latency.Programs(h, b) {
				names[p.Name[:min(len(p.Name), 15)]] = true
			}
		}
	}
	return names
}

// heldLatencyPrograms names the latency programs process pid holds.
func heldLatencyPrograms(t *testing.T, pid int) []string {
	t.Helper()
	progs, _ := bpfObjectsOf(t, pid)
	ours := latencyProgramNames()
	var held []string
	for id := range progs {
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			t.Fatal(err)
		}
		info, err := prog.Info()
		prog.Close()
		if err != nil {
			t.Fatal(err)
		}
		// The kernel keeps 15 bytes of a name; the library may give the
		// whole one from the program's BTF.
		if ours[info.Name[:min(len(info.Name), 15)]] {
			held = append(held, info.Name)
		}
	}
	return held
}

// startStream runs the stacktop binary's stream with args on the forced
// backend and returns it once it printed its first refresh, with the lines
// it prints from then on.
func startStream(t *testing.T, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	testenv.RequireRoot(t)
	cmd := exec.Command(testenv.Binary(t), append([]string{"stream", "--backend", string(testenv.Backend(t))}, args...)...)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	lines := startLines(t, cmd)
	select {
	case _, ok := <-lines:
		if !ok {
			cmd.Wait()
			testenv.SkipIfRefused(t, stderr.String())
			t.Fatalf("stream %v ended: %s", args, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("stream %v printed nothing in 30s: %s", args, stderr.String())
	}
	return cmd, lines
}

// TestStreamReadWait: `stream --read-wait --format json` gives the late
// reader's connection read_wait_samples adding up to exactly its reads,
// each over 67 ms at p99; it holds the socket-read probes' programs, and
// stream without --read-wait holds no latency program at all.
func TestStreamReadWait(t *testing.T) {
	p := testenv.NewPeer(t, "stc-rwcmd", 71)
	serverPort, runReader := lateTraffic(t, p)

	off, _ := startStream(t, "--format", "json", "--interval", "200ms", "--port", strconv.Itoa(serverPort))
	if held := heldLatencyPrograms(t, off.Process.Pid); len(held) != 0 {
		t.Errorf("stream without --read-wait holds latency programs %v", held)
	}
	off.Process.Kill()

	cmd, lines := startStream(t, "--read-wait", "--format", "json", "--interval", "200ms", "--port", strconv.Itoa(serverPort))
	held := heldLatencyPrograms(t, cmd.Process.Pid)
	if len(held) == 0 {
		t.Errorf("stream --read-wait holds no latency program")
	}
	t.Logf("--read-wait holds %v", held)
	reads := runReader()
	time.Sleep(600 * time.Millisecond) // three refreshes after the last read
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var samples, maxP99 uint64
	var records int
	for line := range lines {
		var r conn.Record
		if !strings.Contains(line, `"proto":"tcp"`) {
			continue
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if r.RemoteAddr != p.PeerIP4 || int(r.RemotePort) != serverPort {
			continue
		}
		records++
		samples += r.ReadWaitSamples
		maxP99 = max(maxP99, r.ReadWaitP99us)
		if r.ReadWaitSamples > 0 && r.Comm != lateReaderComm {
			t.Errorf("read by %q, not the late reader: %s", r.Comm, line)
		}
	}
	if records == 0 {
		t.Fatal("no record of the late reader's connection")
	}
	if samples != reads || maxP99 < 67_000 {
		t.Errorf("read_wait_samples %d over %d records, p99 up to %d µs; the reader made %d reads, each over %v late",
			samples, records, maxP99, reads, lateDelay)
	}
}

// TestServeReadWait: with --collector.read-wait, stacktop_read_wait_seconds
// of the late reader's process counts exactly its reads, none of them
// under 2^26 ns (67 ms); the socket-read probe is the latency collector's
// (the same programs, once), and without the collector no
// stacktop_read_wait_seconds is exported.
func TestServeReadWait(t *testing.T) {
	p := testenv.NewPeer(t, "stc-rwserve", 72)
	_, runReader := lateTraffic(t, p)
	url := startServe(t, "--collector.read-wait", "--interval", "200ms")
	reads := runReader()
	series := func(body, suffix string) string {
		for _, line := range seriesOf(body, "stacktop_read_wait_seconds"+suffix) {
			if strings.Contains(line, `comm="`+lateReaderComm+`"`) && strings.Contains(line, `proto="tcp"`) {
				return line
			}
		}
		return ""
	}
	value := func(line string) uint64 {
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		return uint64(v)
	}
	var body string
	testenv.Eventually(t, 10*time.Second, "the late reader's read wait", func() error {
		body = scrape(t, url)
		line := series(body, "_count")
		if line == "" || value(line) != reads {
			return fmt.Errorf("count series %q, want %d reads; every count:\n%s\n%s", line, reads,
				strings.Join(seriesOf(body, "stacktop_read_wait_seconds_count"), "\n"),
				strings.Join(seriesOf(body, "stacktop_latency_packets_total"), "\n"))
		}
		return nil
	})
	for _, line := range seriesOf(body, "stacktop_read_wait_seconds_bucket") {
		if strings.Contains(line, `comm="`+lateReaderComm+`"`) && strings.Contains(line, `le="0.067108864"`) && value(line) != 0 {
			t.Errorf("reads %v late counted at or below 67 ms: %s; every count:\n%s", lateDelay, line,
				strings.Join(seriesOf(body, "stacktop_read_wait_seconds_count"), "\n"))
		}
	}
	if sum := series(body, "_sum"); value(sum) < uint64(float64(reads)*0.1) {
		t.Errorf("sum %s for %d reads over 100 ms late", sum, reads)
	}

	other := scrape(t, startServe(t, "--interval", "200ms"))
	if got := seriesOf(other, "stacktop_read_wait_seconds_count"); len(got) != 0 {
		t.Errorf("read wait exported without --collector.read-wait: %v", got)
	}
}
