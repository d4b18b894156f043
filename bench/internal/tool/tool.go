// SPDX-License-Identifier: Apache-2.0

// Package tool starts and stops the observability tools the benchmark
// compares, each in a process of its own, and knows when one is ready: its
// BPF programs are loaded and attached, so measuring can begin.
package tool

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/bench/internal/bpfobj"
	"github.com/stacktop/stacktop/bench/internal/periodic"
)

var (
	//go:embed netstacklat.bt
	netstacklatBT []byte
	//go:embed tcptop.bt
	tcptopBT []byte
)

// Env is what every tool needs to run.
type Env struct {
	Stacktop  string         // path of the stacktop binary
	Bench     string         // path of the harness binary, which the floor tools run
	Dir       string         // scratch directory: logs, scripts
	ServeAddr netip.AddrPort // where `stacktop serve` listens
}

// Tool is one way of observing the host under load.
type Tool struct {
	Name  string
	About string // how it runs, for the report
	// Command is the stacktop command the tool runs, "" for other tools.
	Command string
	// args returns the arguments after the stacktop command (or the whole
	// command line of another tool); extra arguments are appended.
	args func(env Env) ([]string, error)
	// scrape: GET /metrics every second while running, like Prometheus.
	scrape bool
	// ready says how to tell that the tool's programs are all attached,
	// beyond its set of BPF programs holding still.
	ready readiness
	// timestamping: hold a socket with RX software timestamping open while
	// running, which `stacktop latency` does itself and bpftrace cannot.
	timestamping bool
}

// readiness is the sign, besides a stable set of BPF programs, that a tool
// finished attaching. A stable set alone is not enough: on a loaded machine
// one program's load can take longer than the second the set must hold
// still, and the rounds would then measure a half-attached tool.
type readiness int

const (
	readyPrograms    readiness = iota // the stable set is all there is (bpftrace)
	readyFirstReport                  // its first report: stacktop prints none before every hook is attached
	readyEndpoint                     // /-/ready answers 200: serve listens before it attaches
)

// Tools are all the tools, by name; "none" is the baseline.
var Tools = []Tool{
	{Name: "none", About: "no tool running (baseline)"},
	{Name: "latency", About: "`stacktop latency --interval 1s > /dev/null` (all probes)",
		Command: "latency", args: fixed("--interval", "1s"), ready: readyFirstReport},
	{Name: "latency-read", About: "`stacktop latency -e tcp-socket-read --interval 1s > /dev/null` (Cloudflare's configuration)",
		Command: "latency", args: fixed("-e", "tcp-socket-read", "--interval", "1s"), ready: readyFirstReport},
	{Name: "latency-sample", About: "`stacktop latency --sample 10 --interval 1s > /dev/null` (all probes, a random 1 in 10 packets recorded); not in the default `-tools`",
		Command: "latency", args: fixed("--sample", "10", "--interval", "1s"), ready: readyFirstReport},
	{Name: "latency-slow", About: "`stacktop latency --slow 1s --interval 1s > /dev/null` (all probes, a slow-tail threshold the load does not reach)",
		Command: "latency", args: fixed("--slow", "1s", "--interval", "1s"), ready: readyFirstReport},
	{Name: "latency-at", About: "`stacktop latency -e tcp-socket-read --at tracepoint:tcp:tcp_probe --interval 1s > /dev/null` (Cloudflare's probe and a user-named one on every TCP segment an established connection receives)",
		Command: "latency", args: fixed("-e", "tcp-socket-read", "--at", "tracepoint:tcp:tcp_probe", "--interval", "1s"), ready: readyFirstReport},
	{Name: "stream", About: "`stacktop stream --format json --interval 1s > /dev/null`",
		Command: "stream", args: fixed("--format", "json", "--interval", "1s"), ready: readyFirstReport},
	{Name: "stream-tcp", About: "`stacktop stream --tcp --format json --interval 1s > /dev/null`: TCP only, so no UDP program (where fentry is refused, the cgroup_skb ones run for every packet); not in the default `-tools`",
		Command: "stream", args: fixed("--tcp", "--format", "json", "--interval", "1s"), ready: readyFirstReport},
	{Name: "stream-readwait", About: "`stacktop stream --read-wait --format json --interval 1s > /dev/null`: with each connection's read wait (the socket-read probes and per-socket histograms); not in the default `-tools`",
		Command: "stream", args: fixed("--read-wait", "--format", "json", "--interval", "1s"), ready: readyFirstReport},
	{Name: "serve", About: "`stacktop serve` with its default flags, /metrics scraped every second",
		Command: "serve", args: serve(), scrape: true, ready: readyEndpoint},
	{Name: "serve-readwait", About: "`stacktop serve --collector.read-wait`, /metrics scraped every second: read wait per process from the default probe's programs; not in the default `-tools`",
		Command: "serve", args: serve("--collector.read-wait"), scrape: true, ready: readyEndpoint},
	{Name: "serve-tcp", About: "`stacktop serve --tcp`, /metrics scraped every second: the default probe and TCP connections only, so no UDP program (where fentry is refused, the cgroup_skb ones run for every packet); not in the default `-tools`",
		Command: "serve", args: serve("--tcp"), scrape: true, ready: readyEndpoint},
	{Name: "serve-tcp-conns", About: "`stacktop serve --tcp --no-collector.latency`, /metrics scraped every second: TCP connections only, no program on any packet or read; not in the default `-tools`",
		Command: "serve", args: serve("--tcp", "--no-collector.latency"), scrape: true, ready: readyEndpoint},
	// The floor tools: empty programs at the hooks a tool's programs run
	// at (tracepoint backend), RX timestamping on where the tool turns
	// it on. What they cost no implementation at those hooks can save.
	{Name: "empty-read", About: "empty programs where `latency-read` runs its two (raw tracepoints `skb_copy_datagram_iovec`, `sock_recv_length`), RX timestamping on: its floor; not in the default `-tools`",
		args: empty("read"), ready: readyFirstReport, timestamping: true},
	{Name: "empty-latency", About: "empty programs where `latency` runs its five (netfilter PRE_ROUTING and LOCAL_IN, `sk_data_ready`, the two of `empty-read`), RX timestamping on: its floor; not in the default `-tools`",
		args: empty("netfilter", "enqueue", "read"), ready: readyFirstReport, timestamping: true},
	{Name: "empty-stream-tcp", About: "empty programs where `stream --tcp` runs its four per connection (two at raw tracepoint `inet_sock_set_state`, two at `tcp_destroy_sock`): its floor; not in the default `-tools`",
		args: empty("conns"), ready: readyFirstReport},
	{Name: "empty-stream", About: "the programs of `empty-stream-tcp`, an empty `cgroup/sock_create` and empty `cgroup_skb` ingress and egress programs on the cgroup v2 root, where `stream` counts UDP when fentry is refused: `stream`'s floor; not in the default `-tools`",
		args: empty("conns", "udp"), ready: readyFirstReport},
	{Name: "empty-serve", About: "the programs of `empty-read` and `empty-stream` together, RX timestamping on: `serve`'s floor; not in the default `-tools`",
		args: empty("read", "conns", "udp"), ready: readyFirstReport, timestamping: true},
	{Name: "bpftrace", About: "bpftrace 0.17 script: netstacklat's histograms from classic tracepoints, printed every second",
		args: bpftrace, timestamping: true},
	{Name: "bpftrace-tcptop", About: "bpftrace 0.17 script: a naive tcptop, per-socket byte sums at the `sock_send_length` and `sock_recv_length` tracepoints, closes counted at `inet_sock_set_state`, the busiest printed and the sums cleared every second",
		args: bpftraceTcptop},
}

// Lookup returns the tools with the given names, in that order.
func Lookup(names []string) ([]Tool, error) {
	var out []Tool
	for _, n := range names {
		t, ok := Named(n)
		if !ok {
			return nil, fmt.Errorf("unknown tool %q (known: %s)", n, strings.Join(Names(), ", "))
		}
		out = append(out, t)
	}
	return out, nil
}

// Named returns the tool called name.
func Named(name string) (Tool, bool) {
	i := slices.IndexFunc(Tools, func(t Tool) bool { return t.Name == name })
	if i < 0 {
		return Tool{}, false
	}
	return Tools[i], true
}

// Names lists the tool names.
func Names() []string {
	var n []string
	for _, t := range Tools {
		n = append(n, t.Name)
	}
	return n
}

func fixed(args ...string) func(Env) ([]string, error) {
	return func(Env) ([]string, error) { return args, nil }
}

// serve is told where to listen and nothing else but flags, so with none
// it runs with its default probes and connection tracking, as a user would
// run it.
func serve(flags ...string) func(Env) ([]string, error) {
	return func(env Env) ([]string, error) {
		return append([]string{"--web.listen-address", env.ServeAddr.String()}, flags...), nil
	}
}

// empty runs `bench empty` with the named hook sets (bench/empty.go).
func empty(sets ...string) func(Env) ([]string, error) {
	return func(env Env) ([]string, error) {
		return []string{env.Bench, "empty", "-hooks", strings.Join(sets, ",")}, nil
	}
}

func bpftrace(env Env) ([]string, error) {
	script, err := writeScript(env, "netstacklat.bt", netstacklatBT)
	if err != nil {
		return nil, err
	}
	offset, err := realtimeOffset()
	if err != nil {
		return nil, err
	}
	return []string{"bpftrace", script, strconv.FormatInt(offset, 10)}, nil
}

// bpftraceTcptop runs tcptop.bt with room for a second's sockets under
// connection churn (bpftrace's maps hold 4,096 keys by default).
func bpftraceTcptop(env Env) ([]string, error) {
	script, err := writeScript(env, "tcptop.bt", tcptopBT)
	return []string{"env", "BPFTRACE_MAP_KEYS_MAX=65536", "bpftrace", script}, err
}

// writeScript writes an embedded bpftrace script into the scratch directory.
func writeScript(env Env, name string, text []byte) (string, error) {
	path := filepath.Join(env.Dir, name)
	return path, os.WriteFile(path, text, 0o644)
}

// Running is a started tool.
type Running struct {
	Tool    Tool
	Started time.Time // when it was executed
	cmd     *exec.Cmd
	exited  chan struct{}
	stopAux []func()
	logPath string
}

// Start runs t with stdout going to stdout (nil: /dev/null) and returns once
// it is ready. The baseline tool "none" starts nothing.
func Start(ctx context.Context, env Env, t Tool, stdout io.Writer, extra ...string) (*Running, error) {
	r := &Running{Tool: t, Started: time.Now()}
	if t.args == nil {
		return r, nil
	}
	args, err := t.args(env)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.Name, err)
	}
	var argv []string
	if t.Command != "" {
		argv = []string{env.Stacktop, t.Command}
	}
	argv = slices.Concat(argv, args, extra)
	if t.timestamping {
		stop, err := holdTimestamping()
		if err != nil {
			return nil, err
		}
		r.stopAux = append(r.stopAux, stop)
	}
	r.logPath = filepath.Join(env.Dir, t.Name+".log")
	log, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.Stop()
		return nil, err
	}
	defer log.Close()
	fmt.Fprintf(log, "--- %s %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	r.cmd = exec.Command(argv[0], argv[1:]...)
	r.cmd.Stdout, r.cmd.Stderr = stdout, log
	reported := make(chan struct{})
	if t.ready == readyFirstReport {
		w := stdout
		if w == nil {
			w = io.Discard
		}
		r.cmd.Stdout = &firstWrite{w: w, seen: reported}
	}
	r.Started = time.Now()
	if err := r.cmd.Start(); err != nil {
		r.Stop()
		return nil, fmt.Errorf("starting %s: %w", t.Name, err)
	}
	r.exited = make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(r.exited) }()
	if err := r.waitAttached(ctx, 60*time.Second); err != nil {
		r.Stop()
		return nil, fmt.Errorf("%s: %w (log: %s)", t.Name, err, r.logPath)
	}
	switch t.ready {
	case readyFirstReport:
		err = r.waitFor(ctx, reported, "its first report")
	case readyEndpoint:
		pollCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		ready := make(chan struct{})
		go func() {
			if PollReady(pollCtx, "http://"+env.ServeAddr.String()+"/-/ready") == nil {
				close(ready)
			}
		}()
		err = r.waitFor(ctx, ready, "/-/ready")
	}
	if err != nil {
		r.Stop()
		return nil, fmt.Errorf("%s: %w (log: %s)", t.Name, err, r.logPath)
	}
	if t.scrape {
		stop, err := scrapeEverySecond(ctx, "http://"+env.ServeAddr.String()+"/metrics", r.exited)
		if err != nil {
			r.Stop()
			return nil, fmt.Errorf("%s: %w (log: %s)", t.Name, err, r.logPath)
		}
		r.stopAux = append(r.stopAux, stop)
	}
	return r, nil
}

// Pid is the tool's process id, 0 for the baseline.
func (r *Running) Pid() int {
	if r.cmd == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// Exited is closed when the tool's process ends.
func (r *Running) Exited() <-chan struct{} { return r.exited }

// waitAttached returns once the process holds BPF programs and their set
// has not changed for a second: loading and attaching are over.
func (r *Running) waitAttached(ctx context.Context, timeout time.Duration) error {
	deadline := time.After(timeout)
	var last bpfobj.Held
	var stableSince time.Time
	for {
		select {
		case <-r.exited:
			return fmt.Errorf("exited before attaching: %v", r.cmd.ProcessState)
		case <-deadline:
			return fmt.Errorf("no stable set of BPF programs after %v", timeout)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		h, err := bpfobj.HeldBy(r.Pid())
		if err != nil {
			continue
		}
		if !slices.Equal(h.Progs, last.Progs) || len(h.Progs) == 0 {
			last, stableSince = h, time.Now()
			continue
		}
		if time.Since(stableSince) >= time.Second {
			return nil
		}
	}
}

// waitFor returns once done is closed, or fails when the tool exits first
// or a minute passes.
func (r *Running) waitFor(ctx context.Context, done <-chan struct{}, what string) error {
	select {
	case <-done:
		return nil
	case <-r.exited:
		return fmt.Errorf("exited before %s: %v", what, r.cmd.ProcessState)
	case <-time.After(time.Minute):
		return fmt.Errorf("no %s after a minute", what)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// firstWrite passes everything to w and closes seen at the first write.
type firstWrite struct {
	w    io.Writer
	seen chan struct{}
	once sync.Once
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.once.Do(func() { close(f.seen) })
	return f.w.Write(p)
}

// PollReady returns once url answers 200, checked every 5 ms (start-up is
// timed by it), or with ctx's error.
func PollReady(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second}
	for ctx.Err() == nil {
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return ctx.Err()
}

// Stop ends the tool the way a user would (SIGINT, so it prints its final
// report) and kills it if it has not exited after 10 s.
func (r *Running) Stop() {
	for _, stop := range r.stopAux {
		stop()
	}
	r.stopAux = nil
	if r.cmd == nil || r.exited == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
}

// holdTimestamping opens a UDP socket asking for RX software timestamps,
// which makes the kernel stamp skb->tstamp on every received packet for as
// long as it is open.
func holdTimestamping() (func(), error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("timestamping socket: %w", err)
	}
	flags := unix.SOF_TIMESTAMPING_RX_SOFTWARE | unix.SOF_TIMESTAMPING_SOFTWARE
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING_NEW, flags); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("SO_TIMESTAMPING: %w", err)
	}
	return func() { unix.Close(fd) }, nil
}

// scrapeEverySecond waits for url to answer, then fetches it every second
// until stopped, as a Prometheus server would.
func scrapeEverySecond(ctx context.Context, url string, exited <-chan struct{}) (func(), error) {
	client := &http.Client{Timeout: 5 * time.Second}
	get := func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for err := get(); err != nil; err = get() {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("scraping: %w", err)
		}
		select {
		case <-exited:
			return nil, errors.New("exited before serving /metrics")
		case <-time.After(100 * time.Millisecond):
		}
	}
	// A failed scrape is the tool's problem, visible in its log.
	return periodic.Start(ctx, time.Second, func() { _ = get() }), nil
}

// realtimeOffset returns CLOCK_REALTIME - CLOCK_BOOTTIME in ns, the
// boot-time reading bracketed by two realtime readings, keeping the
// tightest of a few tries.
func realtimeOffset() (int64, error) {
	var best, gap int64 = 0, -1
	for range 16 {
		var rt1, boot, rt2 unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_REALTIME, &rt1); err != nil {
			return 0, err
		}
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
			return 0, err
		}
		if err := unix.ClockGettime(unix.CLOCK_REALTIME, &rt2); err != nil {
			return 0, err
		}
		if g := rt2.Nano() - rt1.Nano(); gap < 0 || g < gap {
			best, gap = (rt1.Nano()+rt2.Nano())/2-boot.Nano(), g
		}
	}
	return best, nil
}
