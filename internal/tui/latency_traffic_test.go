// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestLatencyViewOfRealReads: the real socket-read probe, scoped to a
// peer's veth, feeds the model as Run does (cumulative reads turned into
// intervals). n TCP messages read 120 ms late show, at 80×24, as exactly n
// reads in the newest refresh, marked only in the buckets from (67.1ms,
// 134ms] up to the one of the longest exchange; the next refresh, without
// traffic, has an empty newest column.
func TestLatencyViewOfRealReads(t *testing.T) {
	testenv.RequireRoot(t)
	p := testenv.NewPeer(t, "stl-tuilat", 181)
	tr, err := latency.Start(latency.Config{Backend: testenv.Backend(t), Hooks: latency.HookSet(0).With(latency.UDPStart).With(latency.TCPSocketRead),
		Ifindexes: []uint32{uint32(p.HostIndex)}})
	if err != nil {
		testenv.SkipIfRefused(t, err.Error())
		t.Fatal(err)
	}
	defer tr.Close()
	read := func() []hist.Series {
		s, err := tr.Read()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	testenv.Until(t, 5*time.Second, "an RX-stamped datagram at udp-start", func() bool {
		for _, s := range read() {
			if s.Hook == latency.UDPStart.String() && s.Hist.Count() > 0 {
				return true
			}
		}
		p.UDPToHost(t, testenv.V4, 1, 0)
		return false
	})

	m := NewModel(latencyHeader, Sort{})
	m.Resize(80, 24)
	var iv latency.Intervals
	refresh := func() string {
		m.take(prepare(conn.Snapshot{Time: time.Now()}, iv.Next(read())))
		return m.Render(PlainTheme())
	}
	refresh() // everything so far: the warm-up
	press(m, "L")

	const n = 4
	const lateSlot = 27 // (2^26, 2^27] ns: 67.1 ms to 134 ms
	longest := p.TCPToHost(t, testenv.V4, n, 120*time.Millisecond)
	screen := refresh()
	checkScreen(t, screen, 80, 24)
	if !strings.Contains(screen, "tcp-socket-read   last refresh: "+strconv.Itoa(n)+" ") {
		t.Fatalf("want exactly %d reads in the newest refresh:\n%s", n, screen)
	}
	top := hist.Slot(uint64(longest))
	marked := 0
	for slot := 0; slot <= hist.MaxSlot; slot++ {
		row, ok := heatRowIfAny(screen, "tcp-socket-read", latency.SlotText(slot))
		if !ok {
			continue
		}
		newest := []rune(row)[len([]rune(row))-1]
		if newest == ' ' {
			continue
		}
		marked++
		if slot < lateSlot || slot > top {
			t.Errorf("a read marked at %s, outside %s..%s (longest exchange %v):\n%s",
				latency.SlotText(slot), latency.SlotText(lateSlot), latency.SlotText(top), longest, screen)
		}
	}
	if marked == 0 {
		t.Fatalf("no bucket marked in the newest refresh:\n%s", screen)
	}

	screen = refresh()
	if !strings.Contains(screen, "tcp-socket-read   last refresh: 0 ") {
		t.Errorf("a refresh without traffic must count nothing:\n%s", screen)
	}
	for slot := 0; slot <= hist.MaxSlot; slot++ {
		if row, ok := heatRowIfAny(screen, "tcp-socket-read", latency.SlotText(slot)); ok && !strings.HasSuffix(row, " ") {
			t.Errorf("newest column marked at %s after a refresh without traffic:\n%s", latency.SlotText(slot), screen)
		}
	}
}
