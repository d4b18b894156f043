// SPDX-License-Identifier: Apache-2.0

package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/testenv"
)

// TestTopLatencyViewUnderTmux: `top --latency.probes udp-start,tcp-socket-read`
// in an 80×24 tmux pane; L shows a heatmap block per probe with the legend,
// and while a peer sends datagrams and TCP messages read 120 ms late, the
// newest column of tcp-socket-read gets a mark in the (67.1ms, 134ms]
// bucket; L returns to the table and q exits 0.
func TestTopLatencyViewUnderTmux(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "tmux")
	peer := testenv.NewPeer(t, "stt-tuilat", 182)
	pane := startPane(t, 80, 24, "", "top", "--interval", "300ms", "--latency.probes", "udp-start,tcp-socket-read")
	pane.await("the table", func(s string) bool { return strings.Contains(s, "? help") })
	pane.keys("L")
	lateRead := regexp.MustCompile(`(?m)^ *≤134ms │.*\S$`) // a mark in the newest column
	pane.await("a late read in the newest refresh", func(s string) bool {
		peer.UDPToHost(t, testenv.V4, 1, 0) // RX timestamping on
		peer.TCPToHost(t, testenv.V4, 2, 120*time.Millisecond)
		return strings.Contains(s, "udp-start   last refresh:") && strings.Contains(s, "≥60% of the refresh's samples") &&
			lateRead.MatchString(pane.screen())
	})
	pane.keys("L")
	pane.await("the table again", func(s string) bool {
		return !strings.Contains(s, "last refresh:") && strings.Contains(s, "connections")
	})
	pane.keys("q")
	pane.expectExit(0)
}
