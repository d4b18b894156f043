// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestLatencySlowEvents runs `latency --slow 150ms --format json` while a
// peer sends to two TCP connections of ours: one read 300 ms late, one at
// once. Each late read is one "slow" line naming that connection and this
// process; the prompt one has none; each report ends with a summary whose
// printed count is the number of event lines, nothing lost or limited.
func TestLatencySlowEvents(t *testing.T) {
	p := testenv.NewPeer(t, "stl-slowcli", 22)
	cmd, lines := runningLatency(t, "-e", "tcp-socket-read,udp-socket-read", "-i", p.HostIf, "--slow", "150ms",
		"--format", "json", "-r", "100ms")
	// The probes are attached and stamping is on once a prompt read counts.
	deadline := time.Now().Add(startTimeout)
	var out []string
	for !strings.Contains(strings.Join(out, "\n"), `"hook":"udp-socket-read"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no udp-socket-read record within %v: %q", startTimeout, out)
		}
		p.UDPToHost(t, testenv.V4, 1, 0)
		out = append(out, drainLines(lines, 100*time.Millisecond)...)
	}

	const n = 3
	slow, slowPeer := p.TCPFromPeer(t, testenv.V4)
	fast, fastPeer := p.TCPFromPeer(t, testenv.V4)
	for range n {
		testenv.Exchange(t, fast, fastPeer, 0)
		testenv.Exchange(t, slow, slowPeer, 300*time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for line := range lines {
		out = append(out, line)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}

	slowPort := slow.LocalAddr().(*net.TCPAddr).AddrPort().Port()
	fastPort := fast.LocalAddr().(*net.TCPAddr).AddrPort().Port()
	comm := filepath.Base(os.Args[0])
	comm = comm[:min(len(comm), 15)]
	var events, slowReads int
	var last map[string]any
	for _, line := range out {
		var kind struct{ Event string }
		if err := json.Unmarshal([]byte(line), &kind); err != nil {
			t.Fatalf("not JSON: %q: %v", line, err)
		}
		switch kind.Event {
		case "slow":
			events++
			var ev latency.SlowEvent
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatal(err)
			}
			if ev.LocalPort == fastPort {
				t.Errorf("an event of the prompt connection: %s", line)
			}
			if ev.LocalPort == slowPort {
				slowReads++
				want := netip.AddrPortFrom(p.PeerIP4, slowPeer.LocalAddr().(*net.TCPAddr).AddrPort().Port())
				if ev.Hook != "tcp-socket-read" || netip.AddrPortFrom(ev.RemoteAddr, ev.RemotePort) != want ||
					ev.PID != uint32(os.Getpid()) || ev.Comm != comm || ev.LatencyNS < uint64(300*time.Millisecond) {
					t.Errorf("slow read %s: want tcp-socket-read from %s, pid %d, comm %q, latency >= 300ms",
						line, want, os.Getpid(), comm)
				}
			}
		case "slow_summary":
			last = map[string]any{}
			if err := json.Unmarshal([]byte(line), &last); err != nil {
				t.Fatal(err)
			}
		}
	}
	if slowReads != n {
		t.Errorf("%d events name the slow connection, want %d:\n%s", slowReads, n, strings.Join(out, "\n"))
	}
	if last == nil || last["printed"] != float64(events) || last["lost"] != float64(0) || last["limited"] != float64(0) {
		t.Errorf("last summary %v, want printed %d, lost 0, limited 0", last, events)
	}
}

// drainLines returns the lines that arrive within d.
func drainLines(lines <-chan string, d time.Duration) []string {
	var out []string
	timeout := time.After(d)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return out
			}
			out = append(out, l)
		case <-timeout:
			return out
		}
	}
}
