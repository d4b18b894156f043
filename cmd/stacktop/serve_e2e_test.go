// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/testenv"
)

// startServe runs `stacktop serve args...` on a free loopback port until the
// test ends, waits until /-/ready says the programs are attached and returns
// the base URL.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	url, _ := startServeLogged(t, args...)
	return url
}

// startServeLogged is startServe that also returns what serve logs.
func startServeLogged(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	testenv.RequireRoot(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int, 1)
	argv := append([]string{"stacktop", "serve", "--web.listen-address", addr,
		"--backend", string(testenv.Backend(t))}, args...)
	go func() { done <- run(ctx, argv, io.Discard, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 && !t.Skipped() {
			t.Errorf("serve %v: exit %d: %s", args, code, stderr.String())
		}
	})
	url := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, &stderr
			}
		}
		select {
		case code := <-done:
			done <- code
			testenv.SkipIfRefused(t, stderr.String())
			t.Fatalf("serve %v exited %d before it was ready: %s", args, code, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve %v: not ready after 30s: %s", args, stderr.String())
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
	}
	return string(body)
}

// seriesOf returns the exposition lines of one metric name.
func seriesOf(body, name string) []string {
	var out []string
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// gaugeOf returns the value of a metric exported as one series without
// labels, or 0 when it is not exported.
func gaugeOf(body, name string) float64 {
	if s := seriesOf(body, name); len(s) == 1 {
		return sampleValue(s[0])
	}
	return 0
}

// sampleValue returns the value of one exposition line.
func sampleValue(line string) float64 {
	v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
	return v
}

// The hooks serve attached, from stacktop_probe_backend_info.
func attachedHooks(body string) []string {
	var hooks []string
	for _, line := range seriesOf(body, "stacktop_probe_backend_info") {
		_, rest, _ := strings.Cut(line, `hook="`)
		hook, _, _ := strings.Cut(rest, `"`)
		// The optional connection hooks depend on the kernel
		// (docs/CONNECTIONS.md): not part of what a flag decides.
		if !slices.Contains([]string{"tcp-accept", "tcp-counters", "tcp-adopt", "udp-drops"}, hook) {
			hooks = append(hooks, hook)
		}
	}
	slices.Sort(hooks)
	return hooks
}

// serve attaches by default only the socket-read latency probes, the
// others one --latency.probes away, --at adds its probe to them, and the
// collector toggles leave out what is switched off: not attached, not
// exported.
func TestServeProbeSetAndCollectors(t *testing.T) {
	cases := []struct {
		args       []string
		hooks      string // attached, sorted
		connPrefix bool   // connection metrics exported
	}{
		{nil, "tcp-destroy,tcp-socket-read,tcp-state,udp-egress,udp-ingress,udp-owner", true},
		{[]string{"--no-collector.connections", "--latency.probes", "udp-start,tcp-start"}, "tcp-start,udp-start", false},
		{[]string{"--collector.latency=false"}, "tcp-destroy,tcp-state,udp-egress,udp-ingress,udp-owner", true},
		{[]string{"--no-collector.connections", "-d", "ip-start"}, "tcp-socket-enqueued,tcp-socket-read,tcp-start,udp-socket-enqueued,udp-socket-read,udp-start", false},
		// Read wait shares the latency collector's socket-read probe, or
		// runs it alone: either way no other hook.
		{[]string{"--collector.read-wait"}, "tcp-destroy,tcp-socket-read,tcp-state,udp-egress,udp-ingress,udp-owner", true},
		{[]string{"--collector.read-wait", "--no-collector.latency"}, "tcp-destroy,tcp-socket-read,tcp-state,udp-egress,udp-ingress,udp-owner", true},
		// A protocol selection leaves the other protocol's programs out.
		{[]string{"--tcp"}, "tcp-destroy,tcp-socket-read,tcp-state", true},
		{[]string{"--udp", "--no-collector.latency"}, "udp-egress,udp-ingress,udp-owner", true},
		{[]string{"--no-collector.connections", "--at", "tracepoint:net:netif_receive_skb"}, "tcp-socket-read,tracepoint:net:netif_receive_skb", false},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			body := scrape(t, startServe(t, c.args...))
			if got := strings.Join(attachedHooks(body), ","); got != c.hooks {
				t.Errorf("attached %s, want %s", got, c.hooks)
			}
			if got := len(seriesOf(body, "stacktop_folded_aggregates")) > 0; got != c.connPrefix {
				t.Errorf("connection metrics exported: %v, want %v", got, c.connPrefix)
			}
		})
	}
}

// Thousands of distinct process names (one thread renaming itself before
// each connection, as any local user can) give at most --connections.max-series
// aggregates their own series; the rest are counted in comm="other" and in
// stacktop_folded_aggregates.
func TestServeMaxSeriesWithThousandsOfProcessNames(t *testing.T) {
	const names, limit, payload = 3000, 50, 10
	url := startServe(t, "--no-collector.latency", "--tcp", "--interval", "200ms", "--connections.max-series", strconv.Itoa(limit))
	l := testenv.ServeLoopbackTCP(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	errs := make(chan error, 1)
	go func() { errs <- testenv.DialNamed(l.Addr().String(), "stm-", names, payload) }()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	// Until every connection's closed record is in: the names fold into
	// "other" as they come, and the last bytes may come after the last
	// name has folded.
	var body string
	var sent []string
	var folded, ours float64 // ours: bytes of the renamed thread, in own series and in other
	deadline := time.Now().Add(10 * time.Second)
	for {
		body = scrape(t, url)
		folded = gaugeOf(body, "stacktop_folded_aggregates")
		sent = seriesOf(body, "stacktop_sent_bytes_total")
		ours = 0
		for _, line := range sent {
			if strings.Contains(line, `comm="stm-`) || strings.Contains(line, `comm="other"`) {
				ours += sampleValue(line)
			}
		}
		// A connection whose events the kernel could not deliver (a
		// program run skipped: on 7.x a task preempted inside it) is
		// counted lost and may miss its bytes; nothing else may.
		lost := gaugeOf(body, "stacktop_lost_events_total")
		if folded >= names-limit && ours >= names*payload-lost*payload {
			if lost > 0 {
				t.Logf("%v events lost, %v bytes missing", lost, names*payload-ours)
			}
			break
		}
		if time.Now().After(deadline) {
			var others []string // where missing bytes may have gone instead
			for _, line := range sent {
				if !strings.Contains(line, `comm="stm-`) && !strings.Contains(line, `comm="other"`) {
					others = append(others, line)
				}
			}
			for _, name := range []string{"stacktop_lost_events_total", "stacktop_map_full_total", "stacktop_connections_opened_total", "stacktop_connections_closed_total", "stacktop_open_connections"} {
				others = append(others, seriesOf(body, name)...)
			}
			t.Fatalf("after 10s: stacktop_folded_aggregates %v (want at least %d), sent bytes of the renamed thread in own and other series %v (want at least %d); other series:\n%s",
				folded, names-limit, ours, names*payload, strings.Join(others, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(sent) > limit+1 {
		t.Errorf("%d stacktop_sent_bytes_total series, want at most %d and other", len(sent), limit)
	}
	t.Logf("%d names: %d sent-bytes series, scrape %d bytes", names, len(sent), len(body))
}

// --web.systemd-socket serves on the socket systemd passes (LISTEN_FDS, fd 3
// on, for this pid) and ignores --web.listen-address.
func TestServeSystemdSocket(t *testing.T) {
	testenv.RequireRoot(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// exec keeps the shell's pid, which is what LISTEN_PID must name.
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`, testenv.Binary(t),
		"serve", "--web.systemd-socket", "--web.listen-address", "127.0.0.1:1", "--no-collector.connections",
		"--backend", string(testenv.Backend(t)), "--duration", "60s")
	cmd.ExtraFiles = []*os.File{f}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	client := &http.Client{Timeout: 2 * time.Second} // an unserved socket would hang
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("http://" + l.Addr().String() + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			testenv.SkipIfRefused(t, stderr.String())
			t.Fatalf("not ready on the passed socket after 30s (%v): %s", err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestServeSampling: serve --sample 4 exports stacktop_latency_sample_every
// 4 (1 without it), and its histogram holds about a quarter of the packets
// that an unsampled serve's holds, side by side on the same traffic (within
// six binomial standard deviations).
func TestServeSampling(t *testing.T) {
	p := testenv.NewPeer(t, "stc-sample", 73)
	args := []string{"--no-collector.connections", "--latency.probes", "udp-start", "-i", p.HostIf}
	every := startServe(t, args...)
	sampled := startServe(t, append(args, "--sample", "4")...)
	count := func(url string) (packets, sampleEvery float64) {
		body := scrape(t, url)
		return gaugeOf(body, `netstack_latency_seconds_count{hook="udp-start"}`), gaugeOf(body, "stacktop_latency_sample_every")
	}
	// RX timestamping takes a moment to reach every packet: from the
	// first recorded one on, both see the same stamped packets.
	testenv.Eventually(t, 10*time.Second, "a packet recorded", func() error {
		p.UDPToHost(t, testenv.V4, 10, 0)
		if n, _ := count(every); n == 0 {
			return fmt.Errorf("no udp-start packet recorded")
		}
		return nil
	})
	before, gauge := count(every)
	if gauge != 1 {
		t.Errorf("stacktop_latency_sample_every %v without --sample, want 1", gauge)
	}
	beforeSampled, gauge := count(sampled)
	if gauge != 4 {
		t.Errorf("stacktop_latency_sample_every %v with --sample 4, want 4", gauge)
	}
	const n = 800
	p.UDPToHost(t, testenv.V4, n, 0)
	var total, got float64
	testenv.Eventually(t, 5*time.Second, "every datagram recorded", func() error {
		after, _ := count(every)
		afterSampled, _ := count(sampled)
		total, got = after-before, afterSampled-beforeSampled
		if total < n {
			return fmt.Errorf("%v of %d datagrams recorded", total, n)
		}
		return nil
	})
	if mean, sd := total/4, math.Sqrt(total*3/16); math.Abs(got-mean) > 6*sd {
		t.Errorf("--sample 4 recorded %v of %v packets, want %.0f ± %.0f", got, total, mean, 6*sd)
	}
	t.Logf("--sample 4 recorded %v of %v packets", got, total)
}

// TestServeLogsWhereItListens: at the default log level serve says at info
// where it listens and that TLS is off, as every Prometheus exporter does;
// --log.level warn silences it.
func TestServeLogsWhereItListens(t *testing.T) {
	url, logs := startServeLogged(t, "--no-collector.latency")
	addr := strings.TrimPrefix(url, "http://")
	for _, want := range []string{`level=INFO msg="Listening on" address=` + addr, `level=INFO msg="TLS is disabled." http2=false address=` + addr} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("serve logged no %s:\n%s", want, logs)
		}
	}
	_, logs = startServeLogged(t, "--no-collector.latency", "--log.level", "warn")
	if strings.Contains(logs.String(), "Listening on") {
		t.Errorf("serve --log.level warn logged at info:\n%s", logs)
	}
}
