// SPDX-License-Identifier: Apache-2.0

package attach

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestParsePoint: the two forms are read exactly; anything else is refused
// with what a point looks like.
func TestParsePoint(t *testing.T) {
	for spec, want := range map[string]Point{
		"tracepoint:net:netif_receive_skb":  {Kind: TracepointPoint, Category: "net", Name: "netif_receive_skb"},
		"tracepoint:9p:p9_protocol_dump":    {Kind: TracepointPoint, Category: "9p", Name: "p9_protocol_dump"},
		"fentry:ip_rcv":                     {Kind: FunctionPoint, Name: "ip_rcv"},
		"fentry:__udp_enqueue_schedule_skb": {Kind: FunctionPoint, Name: "__udp_enqueue_schedule_skb"},
	} {
		p, err := ParsePoint(spec)
		if err != nil || p != want || p.String() != spec {
			t.Errorf("ParsePoint(%q) = %+v (%q), %v; want %+v", spec, p, p.String(), err, want)
		}
	}
	for spec, why := range map[string]string{
		"":                                   "must be tracepoint:CATEGORY:NAME or fentry:FUNCTION",
		"kprobe:ip_rcv":                      "must be tracepoint:CATEGORY:NAME or fentry:FUNCTION",
		"tracepoint:netif_receive_skb":       "tracepoint:CATEGORY:NAME",
		"tracepoint::netif_receive_skb":      "category is empty",
		"tracepoint:net:":                    "tracepoint name is empty",
		"tracepoint:net:a:b":                 `"a:b" is not a C identifier`,
		"tracepoint:n-t:x":                   `"n-t" is not a C identifier`,
		"fentry:":                            "function name is empty",
		"fentry:1abc":                        `"1abc" is not a C identifier`,
		"fentry:ip_rcv ":                     "not a C identifier",
		"fentry:foo.isra.0":                  "not a C identifier",
		"fentry:" + strings.Repeat("a", 512): "longer than",
		"Fentry:ip_rcv":                      "must be",
	} {
		var pe *PointError
		if p, err := ParsePoint(spec); !errors.As(err, &pe) || !strings.Contains(err.Error(), why) {
			t.Errorf("ParsePoint(%q) = %+v, %v; want an error saying %q", spec, p, err, why)
		}
	}
}

// FuzzParsePoint: a spec is accepted only as the point's own spelling, and
// never panics.
func FuzzParsePoint(f *testing.F) {
	for _, s := range []string{"tracepoint:net:netif_receive_skb", "fentry:ip_rcv", "tracepoint:a:b:c", "fentry:",
		"tracepoint::x", "fentry:é", "tracepoint:9p:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		p, err := ParsePoint(spec)
		if err != nil {
			return
		}
		if p.String() != spec {
			t.Fatalf("ParsePoint(%q) = %+v, which is spelt %q", spec, p, p.String())
		}
		if again, err := ParsePoint(p.String()); err != nil || again != p {
			t.Fatalf("ParsePoint(%q) again = %+v, %v", spec, again, err)
		}
	})
}

// TestPointArgs: the arguments come from the running kernel's BTF, a
// tracepoint's without its context; the skb is found by type wherever it
// is; a point the kernel lacks is a PointError. Kernel BTF is readable by
// anyone: no root needed, except for the category, which only root can
// compare with tracefs.
func TestPointArgs(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	for _, tc := range []struct {
		spec      string
		skb, sock int
	}{
		{"tracepoint:net:netif_receive_skb", 0, -1},
		{"tracepoint:tcp:tcp_probe", 1, 0},
		{"tracepoint:sock:inet_sock_set_state", -1, 0},
		{"fentry:ip_rcv", 0, -1},
		{"fentry:__udp_enqueue_schedule_skb", 1, 0},
		{"fentry:tcp_sendmsg", -1, 0},
	} {
		p, err := ParsePoint(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		args, err := PointArgs(p)
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		if skb, sock := StructArg(args, "sk_buff"), StructArg(args, "sock"); skb != tc.skb || sock != tc.sock {
			t.Errorf("%s: skb argument %d, socket %d; want %d, %d", tc.spec, skb, sock, tc.skb, tc.sock)
		}
	}
	for spec, why := range map[string]string{
		"tracepoint:net:stacktop_no_such_tracepoint": "this kernel has no tracepoint stacktop_no_such_tracepoint (no btf_trace_stacktop_no_such_tracepoint in its BTF)",
		"fentry:stacktop_no_such_function":           "this kernel has no function stacktop_no_such_function in its BTF",
	} {
		p, _ := ParsePoint(spec)
		var no *PointError
		if _, err := PointArgs(p); !errors.As(err, &no) || err.Error() != why {
			t.Errorf("%s: %v, want a PointError saying %q", spec, err, why)
		}
	}
	if _, err := os.Stat(tracefs + "/events/net"); err != nil {
		t.Logf("category not checked: tracefs: %v", err)
		return
	}
	p, _ := ParsePoint("tracepoint:skb:netif_receive_skb")
	var no *PointError
	if _, err := PointArgs(p); !errors.As(err, &no) || err.Error() != "tracepoint netif_receive_skb is in category net, not skb" {
		t.Errorf("%s: %v, want it to name the category net", p, err)
	}
}
