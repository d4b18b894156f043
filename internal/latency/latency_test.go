package latency

import (
	"github.com/stacktop/stacktop/internal/hist"
	"testing"

	"github.com/stacktop/stacktop/internal/testenv"
)

// TestEveryProbeSeesPeerTraffic sends UDP datagrams, TCP messages and raw TCP
// SYNs from a peer namespace over a veth pair, per address family, and checks
// that each hook's count grows by at least what was generated. The interface
// filter keeps other tests' traffic on this kernel out of the counts.
func TestEveryProbeSeesPeerTraffic(t *testing.T) {
	p := testenv.NewPeer(t, "stl-every", 1)
	tr := start(t, Config{Hooks: AllHooks, Ifindexes: []uint32{uint32(p.HostIndex)}})
	waitForStamps(t, tr, p)

	const datagrams, messages, syns = 20, 10, 15
	for _, f := range []family{v4, v6} {
		before := totals(t, tr)
		udpToHost(t, p, f, datagrams, 0)
		tcpToHost(t, p, f, messages, 0)
		synsToHost(t, p, f, syns)
		got := delta(before, totals(t, tr))
		want := map[Hook]uint64{
			IPStart:           datagrams + syns,
			TCPStart:          syns,
			UDPStart:          datagrams,
			TCPSocketEnqueued: messages,
			UDPSocketEnqueued: datagrams,
			TCPSocketRead:     messages,
			UDPSocketRead:     datagrams,
		}
		for hook, n := range want {
			h := got[hook.String()]
			if h.Count() < n {
				t.Errorf("IPv%d %s: %d samples, want at least %d", f, hook, h.Count(), n)
			}
			if h.Count() > 0 && h.Sum == 0 {
				t.Errorf("IPv%d %s: %d samples but a zero sum", f, hook, h.Count())
			}
		}
		t.Logf("IPv%d: %v", f, counts(got))
	}
}

func counts(m map[string]hist.Histogram) map[string]uint64 {
	out := map[string]uint64{}
	for k, h := range m {
		out[k] = h.Count()
	}
	return out
}
