package latency

import (
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/testenv"
)

// hookHists holds one histogram per hook name.
type hookHists map[string]hist.Histogram

// of returns hook's histogram (empty when the hook recorded nothing).
func (m hookHists) of(h Hook) *hist.Histogram {
	v := m[h.String()]
	return &v
}

// totals sums a tracer's series per hook (over interfaces and cgroups).
func totals(t *testing.T, tr *Tracer) hookHists {
	t.Helper()
	series, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	out := hookHists{}
	for _, s := range series {
		h := out[s.Hook]
		h.Add(&s.Hist)
		out[s.Hook] = h
	}
	return out
}

// delta returns after - before per hook.
func delta(before, after hookHists) hookHists {
	out := hookHists{}
	for hook, a := range after {
		b := before[hook]
		var d hist.Histogram
		for i := range a.Buckets {
			d.Buckets[i] = a.Buckets[i] - b.Buckets[i]
		}
		d.Sum = a.Sum - b.Sum
		out[hook] = d
	}
	return out
}

// start starts a tracer for the test and stops it when the test ends.
func start(t *testing.T, cfg Config) *Tracer {
	t.Helper()
	testenv.RequireRoot(t)
	tr, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("closing tracer: %v", err)
		}
	})
	return tr
}

// waitForStamps sends datagrams from p until udp-start records one: the
// kernel turns RX timestamping on asynchronously (a static key flipped from a
// work queue) after our socket asks for it.
func waitForStamps(t *testing.T, tr *Tracer, p *testenv.Peer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p.UDPToHost(t, testenv.V4, 1, 0)
		for _, s := range mustRead(t, tr) {
			if s.Hook == UDPStart.String() && s.Hist.Count() > 0 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no RX-stamped packet reached udp-start within 5s")
}

func mustRead(t *testing.T, tr *Tracer) []hist.Series {
	t.Helper()
	s, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
