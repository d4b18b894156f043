// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stacktop/stacktop/internal/conn"
)

// bigSnapshot is a busy host: n live TCP connections spread over 200
// processes and many peers, with rates drawn from a fixed seed.
func bigSnapshot(n int) conn.Snapshot {
	rng := rand.New(rand.NewPCG(1, 2))
	states := []string{"ESTABLISHED", "ESTABLISHED", "ESTABLISHED", "TIME_WAIT", "CLOSE_WAIT", "LISTEN"}
	recs := make([]conn.Record, n)
	for i := range recs {
		pid := uint32(1000 + rng.IntN(200))
		recs[i] = conn.Record{
			TS: fixtureTime, Event: conn.Update, Proto: "tcp", Family: 4,
			LocalAddr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), LocalPort: uint16(1024 + i%60000),
			RemoteAddr: netip.AddrFrom4([4]byte{198, 18, byte(rng.IntN(256)), byte(rng.IntN(256))}), RemotePort: 443,
			PID: pid, Comm: fmt.Sprintf("worker-%d", pid), Cgroup: fmt.Sprintf("/kubepods/pod%d", pid%17),
			State: states[rng.IntN(len(states))], BytesIn: rng.Uint64N(1 << 32), BytesOut: rng.Uint64N(1 << 32),
			PacketsIn: rng.Uint64N(1 << 20), PacketsOut: rng.Uint64N(1 << 20),
			RateIn: rng.Float64() * 1e7, RateOut: rng.Float64() * 1e6, RTTus: uint32(rng.IntN(200_000)),
		}
	}
	return conn.Snapshot{Time: fixtureTime, Records: recs}
}

// BenchmarkSnapshot10k measures one refresh with 10,000 live connections:
// take the snapshot into the model (rows, filter, sort, layout) and render
// the screen in colour on a 200×50 terminal.
func BenchmarkSnapshot10k(b *testing.B) {
	snap := bigSnapshot(10_000)
	m := NewModel(fixtureHeader, Sort{})
	m.Resize(200, 50)
	theme := ColorTheme()
	for b.Loop() {
		m.Update(snap)
		_ = m.Render(theme)
	}
}

// The key benchmarks measure key press to rendered screen with 10,000
// connections: the model's work plus rendering, the part of the latency
// that grows with the number of connections.
// Alternating two columns makes every press a full re-sort (a flip of the
// same column would only reverse runs, which pdqsort does cheaply).
func BenchmarkKeySort10k(b *testing.B) { benchmarkKeys(b, "R", "t") }

func BenchmarkKeyFilter10k(b *testing.B) { benchmarkKeys(b, "/", "4", "backspace") }

func BenchmarkKeyScroll10k(b *testing.B) { benchmarkKeys(b, "pgdown") }

// g cycles three views: three presses sum per PID, per remote host, and return.
func BenchmarkKeyPerProcess10k(b *testing.B) { benchmarkKeys(b, "g", "g", "g") }

func benchmarkKeys(b *testing.B, keys ...string) {
	m := NewModel(fixtureHeader, Sort{})
	m.Resize(200, 50)
	m.Update(bigSnapshot(10_000))
	theme := ColorTheme()
	for b.Loop() {
		for _, k := range keys {
			m.Key(k)
			_ = m.Render(theme)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(keys)), "µs/key")
}
