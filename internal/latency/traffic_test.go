// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/stacktop/stacktop/internal/features"
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

// at returns the histogram of the --at probe named spec.
func (m hookHists) at(spec string) *hist.Histogram {
	v := m[spec]
	return &v
}

// defaultHooks lists the hooks of DefaultHooks, in stack order.
func defaultHooks() []Hook {
	var hs []Hook
	for _, h := range Hooks {
		if DefaultHooks.Has(h) {
			hs = append(hs, h)
		}
	}
	return hs
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

// start starts a tracer, on the backend the test run forces, and stops it
// when the test ends.
func start(t *testing.T, cfg Config) *Tracer {
	t.Helper()
	testenv.RequireRoot(t)
	cfg.Backend = testenv.Backend(t)
	tr, err := Start(cfg)
	if err != nil {
		skipIfKernelLacks(t, cfg.Backend, err)
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
	waitForUDPStart(t, tr, func() { p.UDPToHost(t, testenv.V4, 1, 0) })
}

// waitForStampsIn is waitForStamps for datagrams received inside the peer's
// namespace (tracers scoped with -n).
func waitForStampsIn(t *testing.T, tr *Tracer, p *testenv.Peer) {
	t.Helper()
	waitForUDPStart(t, tr, func() { p.UDPToPeer(t, 1) })
}

func waitForUDPStart(t *testing.T, tr *Tracer, send func()) {
	t.Helper()
	testenv.Until(t, 5*time.Second, "an RX-stamped packet at udp-start", func() bool {
		if totals(t, tr).of(UDPStart).Count() > 0 {
			return true
		}
		send()
		return false
	})
}

func mustRead(t *testing.T, tr *Tracer) []hist.Series {
	t.Helper()
	s, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// skipIfKernelLacks marks the test unsupported when a forced backend cannot
// give a hook what it needs on this kernel (a missing program type,
// tracepoint or function). A program the verifier rejected is our bug and
// fails the test, as does any failure under auto.
func skipIfKernelLacks(t *testing.T, backend features.Backend, err error) {
	t.Helper()
	var verifier *ebpf.VerifierError
	if errors.As(err, &verifier) && len(verifier.Log) > 0 {
		t.Fatalf("the verifier rejected a program: %+v", verifier)
	}
	if backend != features.Auto && errors.Is(err, features.ErrNoBackend) {
		testenv.Unsupported(t, "%v", err)
	}
}
