// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/bpffd"
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
		{[]string{"-r", "0"}, `invalid argument "0" for "-r, --interval" flag: must be from 0.01 to 86400 seconds`},
		{[]string{"-r", "-2"}, `invalid argument "-2" for "-r, --interval" flag: must be from 0.01 to 86400 seconds`},
		{[]string{"-r", "0.001"}, `invalid argument "0.001" for "-r, --interval" flag: must be from 0.01 to 86400 seconds`},
		{[]string{"-r", "86401"}, `invalid argument "86401" for "-r, --interval" flag`},
		{[]string{"-r", "NaN"}, `invalid argument "NaN" for "-r, --interval" flag`},
		{[]string{"-r", "Inf"}, `invalid argument "Inf" for "-r, --interval" flag`},
		{[]string{"-r", "99999999999999999999"}, `invalid argument "99999999999999999999" for "-r, --interval" flag: must be from 0.01`},
		{[]string{"-e", ""}, `invalid --enable-probes: names no probe`},
		{[]string{"-d", ""}, `invalid --disable-probes: names no probe`},
		{[]string{"-e", "tcp-socket-read,"}, `invalid --enable-probes: unknown probe`},
		{[]string{"-n", "-2"}, `invalid --netns "-2"`},
		{[]string{"-n", "12345"}, `invalid --netns "12345": no network namespace with this inode`},
		{[]string{"-q", "70000"}, `invalid argument "70000" for "-q, --min-queuelength" flag: must be a whole number from 0 to 65536`},
		{[]string{"-q", "2x"}, `invalid argument "2x" for "-q, --min-queuelength" flag`},
		{[]string{"--sample", "0"}, `invalid argument "0" for "--sample" flag: must be a whole number from 1 to 1000000`},
		{[]string{"--sample", "1000001"}, `invalid argument "1000001" for "--sample" flag`},
		{[]string{"--sample", "1.5"}, `invalid argument "1.5" for "--sample" flag`},
		{[]string{"--sample", "-4"}, `invalid argument "-4" for "--sample" flag`},
		{[]string{"-P", "-e", "ip-start,tcp-socket-enqueued"}, `invalid --group-by-process: groups the socket-read probes only, and neither tcp-socket-read nor udp-socket-read is enabled (enabled: ip-start,tcp-socket-enqueued)`},
		{[]string{"-P", "-d", "tcp-socket-read,udp-socket-read"}, `invalid --group-by-process: groups the socket-read probes only, and neither tcp-socket-read nor udp-socket-read is enabled (enabled: ip-start,tcp-start,udp-start,tcp-socket-enqueued,udp-socket-enqueued)`},
		{[]string{"--backend", "kprobe"}, `invalid --backend "kprobe"`},
		{[]string{"--format", "csv"}, `invalid --format "csv"`},
		{[]string{"--slow", "0"}, `invalid argument "0" for "--slow" flag: must be from 1e-09 to 86400 seconds (1ns to 24h0m0s)`},
		{[]string{"--slow", "-5ms"}, `invalid argument "-5ms" for "--slow" flag: must be from 1e-09 to 86400 seconds`},
		{[]string{"--slow", "86401"}, `invalid argument "86401" for "--slow" flag: must be from 1e-09 to 86400 seconds`},
		{[]string{"--slow", "25h"}, `invalid argument "25h" for "--slow" flag: must be from 1e-09 to 86400 seconds`},
		{[]string{"--slow", ""}, `invalid argument "" for "--slow" flag: not a number of seconds or a duration such as 500ms`},
		{[]string{"--slow-limit", "5"}, `invalid --slow-limit "5": needs --slow`},
		{[]string{"--slow", "50ms", "--slow-limit", "-1"}, `invalid argument "-1" for "--slow-limit" flag: must be a whole number from 0 to 1000000`},
		{[]string{"--slow", "50ms", "--slow-limit", "1000001"}, `invalid argument "1000001" for "--slow-limit" flag`},
		{[]string{"--slow", "0.05", "-e", "udp-start", "-r", "1"}, "stacktop needs CAP_BPF"}, // bare seconds, as -r
		{[]string{"--at", "kprobe:ip_rcv"}, `invalid --at "kprobe:ip_rcv": must be tracepoint:CATEGORY:NAME or fentry:FUNCTION`},
		{[]string{"--at", "tracepoint:netif_receive_skb"}, `invalid --at "tracepoint:netif_receive_skb": a tracepoint is tracepoint:CATEGORY:NAME`},
		{[]string{"--at", "fentry:ip rcv"}, `invalid --at "fentry:ip rcv": the function name "ip rcv" is not a C identifier`},
		{[]string{"--at", "tracepoint:net:stacktop_no_such"}, `invalid --at "tracepoint:net:stacktop_no_such": this kernel has no tracepoint stacktop_no_such`},
		{[]string{"--at", "fentry:stacktop_no_such"}, `invalid --at "fentry:stacktop_no_such": this kernel has no function stacktop_no_such in its BTF`},
		{[]string{"--at", "tracepoint:sock:inet_sock_set_state"}, `invalid --at "tracepoint:sock:inet_sock_set_state": tracepoint sock:inet_sock_set_state takes no struct sk_buff * (`},
		{[]string{"--at", "fentry:tcp_sendmsg"}, `invalid --at "fentry:tcp_sendmsg": function tcp_sendmsg takes no struct sk_buff * (struct sock *sk, `},
		{[]string{"-e", "tracepoint:net:stacktop_no_such"}, `invalid --enable-probes "tracepoint:net:stacktop_no_such": this kernel has no tracepoint`},
		{[]string{"-d", "tracepoint:net:netif_receive_skb"}, `invalid --disable-probes "tracepoint:net:netif_receive_skb": names the built-in probes only`},
		{append(nineAts(), "-r", "1"), `invalid --at "tracepoint:tcp:tcp_retransmit_skb": at most 8 --at probes`},
		{[]string{"--at", "tracepoint:net:netif_receive_skb", "-r", "1"}, "stacktop needs CAP_BPF"},
		{[]string{"-e", "udp-start", "-r", "1"}, "stacktop needs CAP_BPF and CAP_PERFMON (to load BPF programs; CAP_SYS_ADMIN also does) and CAP_NET_ADMIN"},
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

// nineAts is one --at more than latency takes: nine tracepoints with an
// skb that every kernel of the matrix has, the last one too many.
func nineAts() []string {
	var args []string
	for _, tp := range []string{"net:netif_receive_skb", "net:netif_rx", "net:net_dev_queue", "net:net_dev_xmit",
		"net:napi_gro_receive_entry", "skb:kfree_skb", "skb:consume_skb", "tcp:tcp_probe", "tcp:tcp_retransmit_skb"} {
		args = append(args, "--at", "tracepoint:"+tp)
	}
	return args
}

// bpfObjectsOf returns the ids of the BPF programs and links the process
// holds file descriptors of: exactly that run's.
func bpfObjectsOf(t *testing.T, pid int) (progs, links map[int]bool) {
	t.Helper()
	objs, err := bpffd.Held(pid)
	if err != nil {
		t.Fatal(err)
	}
	progs, links = map[int]bool{}, map[int]bool{}
	for _, o := range objs {
		switch o.Kind {
		case bpffd.Prog:
			progs[int(o.ProgID)] = true
		case bpffd.Link:
			links[int(o.LinkID)] = true
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

// runningLatency starts `stacktop latency args...` as root, on the backend
// the test run forces, and returns it with its stdout lines arriving on a
// channel.
func runningLatency(t *testing.T, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	return startLatency(t, append([]string{"--backend", requireBackend(t)}, args...)...)
}

// startLatency starts `stacktop latency args...` as root and returns it with
// its stdout lines arriving on a channel; it is killed when the test ends.
func startLatency(t *testing.T, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t), append([]string{"latency"}, args...)...)
	cmd.Stderr = os.Stderr
	return cmd, startLines(t, cmd)
}

// startLines starts cmd (its Stderr set by the caller) and returns its
// stdout lines on a channel; it is killed when the test ends.
func startLines(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(stdout)
		s.Buffer(nil, 1<<20) // a JSON record of many fields
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	return lines
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
			// how many depends on the backends the kernel gave the probes
			if len(progs) == 0 || len(links) < len(progs) {
				t.Fatalf("while running: programs %v, links %v; want some, and a link per program at least", progs, links)
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
			testenv.Eventually(t, 5*time.Second, "the run's programs and links unloaded after exit", func() error {
				if left := stillLoaded(t, progs, links); len(left) > 0 {
					return fmt.Errorf("%v still loaded", left)
				}
				return nil
			})
		})
	}
}

func isTimestamp(line string) bool {
	_, err := time.Parse(time.RFC3339, line)
	return err == nil
}

// startTimeout bounds how long stacktop latency may take to print its first
// line: on the kernel matrix's emulated guests loading and attaching the
// programs takes seconds.
const startTimeout = time.Minute

func waitForLine(t *testing.T, lines <-chan string, match func(string) bool) string {
	t.Helper()
	timeout := time.After(startTimeout)
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
	// the first record appears once every probe is attached, stamping is
	// on and udp-start counted
	deadline := time.Now().Add(startTimeout)
	for len(lines) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no record within %v", startTimeout)
		}
		p.UDPToHost(t, testenv.V4, 1, 50*time.Millisecond)
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

// TestLatencyListProbes: -l names every probe with the backend it gets
// here: the forced one, or under auto fentry or tracepoint.
func TestLatencyListProbes(t *testing.T) {
	testenv.RequireRoot(t)
	backend := requireBackend(t)
	got, _ := listedBackends(t, backend)
	for _, h := range latency.Hooks {
		b, want := got[h.String()], backend
		if h == latency.NIC {
			want = "tracepoint" // its one tp_btf program, whatever --backend says
		}
		if want != "auto" && b != want || b != "fentry" && b != "tracepoint" {
			t.Errorf("-l --backend %s: %s on %q", backend, h, b)
		}
	}
}

// listedBackends runs `stacktop latency -l --backend backend` and returns the
// backend each probe got ("none" when it got none) and, per probe, the
// refusals -l printed.
func listedBackends(t *testing.T, backend string) (chosen, refusals map[string]string) {
	t.Helper()
	out, err := exec.Command(testenv.Binary(t), "latency", "-l", "--backend", backend).Output()
	if err != nil {
		t.Fatalf("latency -l --backend %s: %v", backend, err)
	}
	chosen, refusals = map[string]string{}, map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if probe, refusal, ok := strings.Cut(line, ": "); ok {
			refusals[probe] += refusal
		} else if f := strings.Fields(line); len(f) >= 3 {
			chosen[f[0]] = f[2]
		}
	}
	for _, h := range latency.Hooks {
		if _, ok := chosen[h.String()]; !ok {
			t.Fatalf("-l does not list %s:\n%s", h, out)
		}
	}
	return chosen, refusals
}

// requireBackend returns the backend the test run forces, having checked
// that this kernel gives it every probe; where it does not, the test is
// unsupported here, with the refusals -l prints as the reason.
func requireBackend(t *testing.T) string {
	t.Helper()
	backend := string(testenv.Backend(t))
	if backend == "auto" {
		return backend
	}
	chosen, refusals := listedBackends(t, backend)
	for _, h := range latency.Hooks {
		if chosen[h.String()] == "none" {
			testenv.Unsupported(t, "%s: %s", h, refusals[h.String()])
		}
	}
	return backend
}

// TestLatencyForcedBackend: --backend fentry|tracepoint runs when the kernel
// gives that backend every probe (as -l says), and otherwise exits 1 naming
// the probe, the backend and the kernel's refusal; the 6.18 host refuses
// fentry, the 5.10 and 6.1 guests the tracepoint backend.
func TestLatencyForcedBackend(t *testing.T) {
	testenv.RequireRoot(t)
	if testenv.Backend(t) != "auto" {
		t.Skip("forces each backend itself: runs once, with auto")
	}
	for _, backend := range []string{"fentry", "tracepoint"} {
		t.Run(backend, func(t *testing.T) {
			chosen, refusals := listedBackends(t, backend)
			var refused string
			for _, h := range latency.Hooks {
				if chosen[h.String()] == "none" {
					refused = h.String()
					break
				}
			}
			args := []string{"latency", "--backend", backend, "-r", "100ms", "--count", "1"}
			if refused != "" {
				args = append(args, "-e", refused)
			}
			cmd := exec.Command(testenv.Binary(t), args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if refused == "" {
				if err != nil {
					t.Fatalf("every probe attaches with --backend %s, yet: %v; stderr: %s", backend, err, stderr.String())
				}
				return
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("--backend %s without %s: exit %v, want 1; stderr: %s", backend, refused, err, stderr.String())
			}
			want := fmt.Sprintf("error: hook %s: no backend could attach (%s: ", refused, backend)
			reason := strings.TrimPrefix(refusals[refused], backend+" refused: ")
			if !strings.HasPrefix(stderr.String(), want) || !strings.Contains(stderr.String(), reason) {
				t.Errorf("stderr %q, want it to start with %q and carry -l's reason %q", stderr.String(), want, reason)
			}
		})
	}
}

// TestLatencyAt: `-e SPEC` measures at that point alone, named by its spec
// in the JSON records, counting at least the peer's datagrams; `-l --at`
// lists the probe with its backend and program; a tracepoint named under
// the wrong category exits 2 naming the right one (root: only root reads
// tracefs); an fentry point where the kernel refuses fentry exits 1 with
// the refusal -l shows, and runs where it does not.
func TestLatencyAt(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Binary(t)
	const rx, fn = "tracepoint:net:netif_receive_skb", "fentry:ip_rcv"

	t.Run("records", func(t *testing.T) {
		p := testenv.NewPeer(t, "stl-atcli", 26)
		cmd, lines := startLatency(t, "-e", rx, "-i", p.HostIf, "--format", "json", "-r", "100ms")
		record := func(line string) latency.Record {
			var r latency.Record
			if err := json.Unmarshal([]byte(line), &r); err != nil || r.Hook != rx {
				t.Errorf("want only records of %s, got %q (%v)", rx, line, err)
			}
			return r
		}
		// the first record appears once the probe is attached and
		// stamping is on
		deadline := time.Now().Add(startTimeout)
		for len(lines) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no record within %v", startTimeout)
			}
			p.UDPToHost(t, testenv.V4, 1, 50*time.Millisecond)
		}
		var first latency.Record
		for len(lines) > 0 {
			first = record(<-lines)
		}
		const n = 20
		p.UDPToHost(t, testenv.V4, n, 0)
		time.Sleep(300 * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		var last latency.Record
		for line := range lines {
			last = record(line)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		if last.Count < first.Count+n || last.Buckets[len(last.Buckets)-1].Count != last.Count {
			t.Errorf("final record %+v after %+v, want %d samples more, with cumulative buckets ending at the count", last, first, n)
		}
	})

	t.Run("list", func(t *testing.T) {
		out, err := exec.Command(bin, "latency", "-l", "-e", "tcp-socket-read", "--at", rx).CombinedOutput()
		if err != nil {
			t.Fatalf("-l: %v\n%s", err, out)
		}
		var row string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, rx+" ") {
				row = line
			}
		}
		if f := strings.Fields(row); len(f) < 4 || f[1] != "yes" || f[2] != "tracepoint" || f[3] != "tp_at" ||
			!strings.Contains(row, "whose argument 1 is the skb") {
			t.Errorf("-l lists %s as %q, want enabled, tracepoint, tp_at, argument 1:\n%s", rx, row, out)
		}
	})

	t.Run("category", func(t *testing.T) {
		var stderr bytes.Buffer
		// Accepted, it would run until stopped (as it did where tracefs
		// was not mounted yet): the deadline turns that into a failure.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "latency", "--at", "tracepoint:skb:netif_receive_skb")
		cmd.Stderr = &stderr
		err := cmd.Run()
		want := `invalid --at "tracepoint:skb:netif_receive_skb": tracepoint netif_receive_skb is in category net, not skb`
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), want) {
			t.Errorf("exit %v, stderr %q; want 2 and %q", err, stderr.String(), want)
		}
	})

	t.Run("fentry", func(t *testing.T) {
		out, err := exec.Command(bin, "latency", "-l", "--at", fn).Output()
		if err != nil {
			t.Fatalf("-l: %v", err)
		}
		var refusal string
		for _, line := range strings.Split(string(out), "\n") {
			if r, ok := strings.CutPrefix(line, fn+": fentry refused: "); ok {
				refusal = r
			}
		}
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "latency", "-e", fn, "-r", "100ms", "--count", "1")
		cmd.Stderr = &stderr
		err = cmd.Run()
		if refusal == "" {
			if err != nil {
				t.Fatalf("-l shows %s attached, yet: %v; stderr: %s", fn, err, stderr.String())
			}
			return
		}
		want := fmt.Sprintf("error: hook %s: no backend could attach (fentry: %s", fn, refusal)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.HasPrefix(stderr.String(), want) {
			t.Errorf("exit %v, stderr %q; want 1 and %q", err, stderr.String(), want)
		}
	})
}

// TestLossWatchWarnsOfUntimedReads: reads a probe saw but could not time
// warn from 1 % of its reads on, at each report where they grew.
func TestLossWatchWarnsOfUntimedReads(t *testing.T) {
	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	w := lossWatch{untimed: map[string]uint64{}}
	const hook = "udp-socket-read"
	for _, c := range []struct {
		recorded, fifoFull, untracked uint64
		want                          string // "" for no warning
	}{
		{1000, 5, 4, ""}, // 0.9 %
		{1000, 20, 12, "probe=udp-socket-read untimed=32 share=3.1%"},
		{1500, 20, 12, ""}, // not grown
		{2000, 40, 20, "probe=udp-socket-read untimed=60 share=2.9%"},
	} {
		logged.Reset()
		w.warn([]latency.Counter{
			{Hook: hook, Reason: latency.ReasonRecorded, Count: c.recorded},
			{Hook: hook, Reason: latency.ReasonFIFOFull, Count: c.fifoFull},
			{Hook: hook, Reason: latency.ReasonReadUntracked, Count: c.untracked},
		})
		if got := logged.String(); c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%+v: logged %q, want %q", c, got, c.want)
		}
	}
}
