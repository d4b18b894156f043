// SPDX-License-Identifier: Apache-2.0

package resolve

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/testenv"
)

// TestNamesFromEtcHosts: addresses the test adds to /etc/hosts
// (IPv4, also asked for as an IPv4-mapped IPv6 address, and IPv6) are named by the real
// resolver, the first call answering "" at once and a later one the name;
// an address with no name stays "", and the unspecified address is never
// looked up. No packet leaves the host: /etc/hosts answers.
func TestNamesFromEtcHosts(t *testing.T) {
	testenv.AddHosts(t, "127.0.0.83 stl-resolve-v4.test", "fd00:5354:183::7 stl-resolve-v6.test")
	n := New()
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.83", "stl-resolve-v4.test"},
		{"::ffff:127.0.0.83", "stl-resolve-v4.test"}, // a mapped address is its IPv4 one
		{"fd00:5354:183::7", "stl-resolve-v6.test"},
	} {
		addr, want := tc.addr, tc.want
		a := netip.MustParseAddr(addr)
		if got := n.Name(a); got != "" && addr != "::ffff:127.0.0.83" {
			t.Errorf("%s: the first call answered %q, want \"\" at once", addr, got)
		}
		testenv.Until(t, 10*time.Second, addr+" named from /etc/hosts", func() bool { return n.Name(a) == want })
	}
	if got := n.Name(netip.IPv4Unspecified()); got != "" {
		t.Errorf("0.0.0.0 named %q", got)
	}
}

// blockingLookup answers only when released, and counts the lookups
// running at once.
type blockingLookup struct {
	release chan struct{}
	mu      sync.Mutex
	running int
	most    int
	calls   map[string]int
}

func (b *blockingLookup) lookup(ctx context.Context, addr string) ([]string, error) {
	b.mu.Lock()
	b.running++
	b.most = max(b.most, b.running)
	b.calls[addr]++
	b.mu.Unlock()
	<-b.release
	b.mu.Lock()
	b.running--
	b.mu.Unlock()
	return []string{"host-" + addr + "."}, nil
}

func (b *blockingLookup) count() (running, most, calls int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.calls {
		calls += c
	}
	return b.running, b.most, calls
}

// TestLookupsNeverBlockAndAreBounded: with every lookup stuck, Name still
// answers (""), at most the bound run at once, an address is looked up
// once however often it is asked for, and once the lookups answer the
// others are started by later calls and every name arrives (without its
// trailing dot).
func TestLookupsNeverBlockAndAreBounded(t *testing.T) {
	b := &blockingLookup{release: make(chan struct{}), calls: map[string]int{}}
	n := newNames(b.lookup, 3)
	addrs := make([]netip.Addr, 10)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{198, 18, 183, byte(i + 1)})
	}
	for range 3 {
		for _, a := range addrs {
			if got := n.Name(a); got != "" {
				t.Fatalf("%s named %q before any lookup answered", a, got)
			}
		}
	}
	testenv.Until(t, 5*time.Second, "three lookups running", func() bool { r, _, _ := b.count(); return r == 3 })
	if _, most, calls := b.count(); most != 3 || calls != 3 {
		t.Fatalf("%d lookups at once, %d started; want 3 and 3", most, calls)
	}
	close(b.release)
	testenv.Until(t, 5*time.Second, "every address named", func() bool {
		for _, a := range addrs {
			if n.Name(a) != "host-"+a.String() {
				return false
			}
		}
		return true
	})
	if _, most, calls := b.count(); most > 3 || calls != len(addrs) {
		t.Errorf("%d lookups at once (bound 3), %d in all for %d addresses", most, calls, len(addrs))
	}
}

// TestNamesExpireAndTheCacheIsBounded: a name is looked up again after its
// time to live, and shown meanwhile; a failure is retried after the shorter
// failure TTL; the cache never holds more than its bound.
func TestNamesExpireAndTheCacheIsBounded(t *testing.T) {
	var mu sync.Mutex
	clock := time.Unix(1_000_000, 0)
	answers := map[string]string{"198.18.183.1": "first."}
	calls := map[string]int{}
	lookup := func(_ context.Context, addr string) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls[addr]++
		if name, ok := answers[addr]; ok {
			return []string{name}, nil
		}
		return nil, fmt.Errorf("no PTR record for %s", addr)
	}
	n := newNames(lookup, 1)
	n.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	named, unnamed := netip.MustParseAddr("198.18.183.1"), netip.MustParseAddr("198.18.183.2")
	settled := func(a netip.Addr) func() bool {
		return func() bool { n.mu.Lock(); defer n.mu.Unlock(); e, ok := n.cache[a]; return ok && !e.pending }
	}
	n.Name(named)
	testenv.Until(t, 5*time.Second, "the first answer", settled(named))
	n.Name(unnamed)
	testenv.Until(t, 5*time.Second, "the failure", settled(unnamed))

	mu.Lock()
	answers["198.18.183.1"] = "second."
	mu.Unlock()
	advance(DefaultFailureTTL)
	if got := n.Name(named); got != "first" {
		t.Fatalf("within its TTL: %q, want first", got)
	}
	testenv.Until(t, 5*time.Second, "the failure retried", func() bool { n.Name(unnamed); mu.Lock(); defer mu.Unlock(); return calls["198.18.183.2"] == 2 })
	advance(DefaultTTL)
	if got := n.Name(named); got != "first" {
		t.Fatalf("expired, while looked up again: %q, want the old name", got)
	}
	testenv.Until(t, 5*time.Second, "the new name", func() bool { return n.Name(named) == "second" })

	n.maxEntries = 2
	for i := range 5 {
		a := netip.AddrFrom4([4]byte{198, 18, 184, byte(i + 1)})
		n.Name(a)
		testenv.Until(t, 5*time.Second, "a lookup", settled(a))
		n.mu.Lock()
		size := len(n.cache)
		n.mu.Unlock()
		if size > 2 {
			t.Fatalf("%d cache entries, bound 2", size)
		}
	}
}

func TestParseServices(t *testing.T) {
	s, err := ParseServices(strings.NewReader(`# comment
ssh		22/tcp				# SSH Remote Login Protocol
domain		53/tcp
domain		53/udp
http		80/tcp		www		# WorldWideWeb HTTP
www-alt		80/tcp
bad		notaport/tcp
short
https 443/TCP
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		proto string
		port  uint16
		want  string
	}{{"tcp", 22, "ssh"}, {"udp", 53, "domain"}, {"tcp", 80, "http"}, {"udp", 22, ""}, {"tcp", 443, "https"}, {"tcp", 8080, ""}} {
		if got := s.Name(tc.proto, tc.port); got != tc.want {
			t.Errorf("%s/%d: %q, want %q", tc.proto, tc.port, got, tc.want)
		}
	}
	if len(s) != 5 {
		t.Errorf("%d entries, want 5: %v", len(s), s)
	}
}
