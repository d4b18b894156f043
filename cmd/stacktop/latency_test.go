package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestLatencyBadInput: every malformed value exits 2 with a message naming
// the flag and the value. The binary runs as nobody: exiting 2 rather than 77
// proves the input was rejected before the privilege check, that is, before
// anything touched the kernel. Valid input as nobody exits 77.
func TestLatencyBadInput(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Binary(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-e", "ip-start,nosuch"}, `invalid --enable-probes "nosuch"`},
		{[]string{"-d", "tcp-strat"}, `invalid --disable-probes "tcp-strat"`},
		{[]string{"-e", "ip-start", "-d", "tcp-start"}, `invalid --disable-probes "tcp-start": cannot be combined with --enable-probes "ip-start"`},
		{[]string{"-p", "0"}, `invalid --pid "0"`},
		{[]string{"-p", "4194305"}, `invalid --pid "4194305"`},
		{[]string{"--pids", "12,x"}, `invalid --pid "x"`},
		{[]string{"-i", "stl-nosuch0"}, `invalid --interface "stl-nosuch0": no such interface`},
		{[]string{"-i", "999999"}, `invalid --interface "999999"`},
		{[]string{"-c", "/stl-no/such/cgroup"}, `invalid --cgroup "/stl-no/such/cgroup"`},
		{[]string{"-c", "987654321987"}, `invalid --cgroup "987654321987": no cgroup with this id`},
		{[]string{"-r", "0"}, `invalid --interval "0s": must be positive`},
		{[]string{"-r", "-2"}, `invalid --interval "-2s": must be positive`},
		{[]string{"-n", "-2"}, `invalid --netns "-2"`},
		{[]string{"-n", "12345"}, `invalid --netns "12345": no network namespace with this inode`},
		{[]string{"-q", "70000"}, `invalid --min-queuelength "70000"`},
		{[]string{"--backend", "kprobe"}, `invalid --backend "kprobe"`},
		{[]string{"--format", "csv"}, `invalid --format "csv"`},
		{[]string{"-e", "udp-start", "-r", "1"}, "requires root privileges"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"latency"}, c.args...)...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			want := 2
			if !strings.HasPrefix(c.want, "invalid") {
				want = 77
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != want {
				t.Fatalf("exit %v, want %d; stderr: %s", err, want, stderr.String())
			}
			if !strings.Contains(stderr.String(), c.want) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), c.want)
			}
		})
	}
}

// bpfObjectsOf returns the ids of the BPF programs and links the process
// holds file descriptors of, from /proc/<pid>/fdinfo: exactly that run's.
func bpfObjectsOf(t *testing.T, pid int) (progs, links map[int]bool) {
	t.Helper()
	progs, links = map[int]bool{}, map[int]bool{}
	infos, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fdinfo/*", pid))
	for _, path := range infos {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		isLink := strings.Contains(string(b), "link_id:")
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			id, err := strconv.Atoi(strings.TrimSpace(v))
			switch {
			case err != nil:
			case k == "link_id":
				links[id] = true
			case k == "prog_id" && !isLink:
				progs[id] = true
			}
		}
	}
	return progs, links
}

// stillLoaded returns the ids among progs and links that the kernel still
// knows (a lookup by id that does not fail with ENOENT).
func stillLoaded(t *testing.T, progs, links map[int]bool) []string {
	t.Helper()
	var left []string
	check := func(kind string, id int, open func() (io.Closer, error)) {
		obj, err := open()
		switch {
		case err == nil:
			obj.Close()
			left = append(left, fmt.Sprintf("%s %d", kind, id))
		case !errors.Is(err, unix.ENOENT):
			t.Fatalf("looking up %s %d: %v", kind, id, err)
		}
	}
	for id := range progs {
		check("program", id, func() (io.Closer, error) { return ebpf.NewProgramFromID(ebpf.ProgramID(id)) })
	}
	for id := range links {
		check("link", id, func() (io.Closer, error) { return link.NewFromID(link.ID(id)) })
	}
	return left
}

// runningLatency starts `stacktop latency args...` as root and returns it
// once its first report is out, with its stdout lines arriving on a channel.
func runningLatency(t *testing.T, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t), append([]string{"latency"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	return cmd, lines
}

// TestLatencySignalsDetachEverything: SIGINT, SIGTERM and SIGHUP each print a
// final report and exit 0, and afterwards the kernel knows none of the
// programs and links the run held (found through its /proc/<pid>/fdinfo, so programs
// of other tests running on the kernel do not matter).
func TestLatencySignalsDetachEverything(t *testing.T) {
	testenv.RequireRoot(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, lines := runningLatency(t, "-r", "200ms")
			waitForLine(t, lines, isTimestamp)
			progs, links := bpfObjectsOf(t, cmd.Process.Pid)
			// 5 programs; netfilter links in IPv4 and IPv6, 3 tp_btf links
			if len(progs) != 5 || len(links) != 2*2+3 {
				t.Fatalf("while running: programs %v, links %v; want 5 programs and 7 links", progs, links)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			var reports int
			for line := range lines {
				if isTimestamp(line) {
					reports++
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("after %v: %v", sig, err)
			}
			if reports < 1 {
				t.Errorf("no final report after %v", sig)
			}
			// the kernel frees programs after an RCU grace period, so
			// they may outlive the process by a moment
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				left := stillLoaded(t, progs, links)
				if len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("5s after exit, %v of the run are still loaded", left)
				}
			}
		})
	}
}

func isTimestamp(line string) bool {
	_, err := time.Parse(time.RFC3339, line)
	return err == nil
}

func waitForLine(t *testing.T, lines <-chan string, match func(string) bool) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("stacktop exited")
			}
			if match(l) {
				return l
			}
		case <-timeout:
			t.Fatal("timed out waiting for stacktop's output")
		}
	}
}

// TestLatencyDisabledProbesStayEmpty runs the command with -d and JSON
// output while a peer sends UDP and TCP: disabled probes never appear, the
// others count the traffic.
func TestLatencyDisabledProbesStayEmpty(t *testing.T) {
	p := testenv.NewPeer(t, "stl-cli", 10)
	disabled := []string{"ip-start", "udp-socket-read", "tcp-socket-enqueued"}
	cmd, lines := runningLatency(t, "-d", strings.Join(disabled, ","), "-i", p.HostIf, "--format", "json", "-r", "100ms")
	// the first record appears once stamping is on and udp-start counted
	deadline := time.Now().Add(10 * time.Second)
	var seen []string
	for len(seen) == 0 && time.Now().Before(deadline) {
		p.UDPToHost(t, testenv.V4, 1, 50*time.Millisecond)
		for len(lines) > 0 {
			seen = append(seen, <-lines)
		}
	}
	const n = 10
	p.UDPToHost(t, testenv.V4, n, 0)
	p.TCPToHost(t, testenv.V6, n, 0)
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	final := map[string]latency.Record{}
	for line := range lines {
		var r latency.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a JSON record: %q: %v", line, err)
		}
		final[r.Hook] = r
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, h := range disabled {
		if r, ok := final[h]; ok {
			t.Errorf("disabled probe %s reported: %+v", h, r)
		}
	}
	for _, h := range []string{"udp-start", "udp-socket-enqueued", "tcp-socket-read"} {
		r := final[h]
		if r.Count < n || len(r.Buckets) == 0 || r.Buckets[len(r.Buckets)-1].Count != r.Count {
			t.Errorf("%s: final record %+v, want count >= %d with cumulative buckets ending at the count", h, r, n)
		}
	}
}

// TestLatencyListProbes: -l names every probe with the backend it gets here.
func TestLatencyListProbes(t *testing.T) {
	testenv.RequireRoot(t)
	out, err := exec.Command(testenv.Binary(t), "latency", "-l").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range latency.Hooks {
		if !strings.Contains(string(out), h.String()) {
			t.Errorf("-l does not list %s:\n%s", h, out)
		}
	}
	if got := strings.Count(string(out), "tracepoint"); got != len(latency.Hooks) {
		t.Errorf("-l shows %d probes on the tracepoint backend, want %d:\n%s", got, len(latency.Hooks), out)
	}
}
