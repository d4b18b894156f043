// SPDX-License-Identifier: Apache-2.0

package connfilter

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/conn"
)

func TestCompileRejectsBadValuesNamingThem(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--port", "0"}, `invalid --port "0"`},
		{[]string{"--port", "65536"}, `invalid --port "65536"`},
		{[]string{"--pid", "0"}, `invalid --pid "0"`},
		{[]string{"--process", "a("}, `invalid --process "a("`},
		{[]string{"--cgroup", "/stc-does-not-exist"}, `invalid --cgroup "/stc-does-not-exist"`},
		{[]string{"--netns", "stc-does-not-exist"}, `invalid --netns "stc-does-not-exist"`},
		{[]string{"--interface", "stc-nope0"}, `invalid --interface "stc-nope0"`},
		{[]string{"-4", "-6"}, `invalid --ipv6 "true": cannot be combined with -4/--ipv4`},
	} {
		var o Options
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.Register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		_, err := o.Compile()
		if clierr.Code(err) != clierr.ExitUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error containing %q", c.args, err, c.want)
		}
	}
}

func TestMatch(t *testing.T) {
	web := conn.Record{Proto: "tcp", LocalAddr: netip.MustParseAddr("127.0.0.1"), LocalPort: 8080,
		RemoteAddr: netip.MustParseAddr("127.0.0.1"), RemotePort: 40000, PID: 10, Comm: "nginx", Cgroup: "/system.slice/nginx.service", Netns: 7}
	dns := conn.Record{Proto: "udp", LocalAddr: netip.MustParseAddr("::ffff:10.0.0.1"), LocalPort: 5353,
		RemoteAddr: netip.MustParseAddr("10.0.0.2"), RemotePort: 53, PID: 20, Comm: "resolved", Cgroup: "/system.slice", Netns: 8}
	for _, c := range []struct {
		name     string
		f        *Filter
		web, dns bool
	}{
		{"nil", nil, true, true},
		{"tcp", &Filter{tcp: true}, true, false},
		{"udp", &Filter{udp: true}, false, true},
		{"remote port", &Filter{tcp: true, udp: true, ports: []uint16{53}}, false, true},
		{"local port", &Filter{tcp: true, udp: true, ports: []uint16{8080}}, true, false},
		{"pid", &Filter{tcp: true, udp: true, pids: []uint32{20}}, false, true},
		{"cgroup subtree", &Filter{tcp: true, udp: true, cgroups: []string{"/system.slice"}}, true, true},
		{"cgroup is not a name prefix", &Filter{tcp: true, udp: true, cgroups: []string{"/system.slice/nginx"}}, false, false},
		{"netns", &Filter{tcp: true, udp: true, netns: 7, netnsSet: true}, true, false},
		{"loopback interface", &Filter{tcp: true, udp: true, ifaces: []ifaceAddrs{{loopback: true}}}, true, false},
		{"-4 (a mapped address is IPv4)", &Filter{tcp: true, udp: true, only4: true}, true, true},
		{"-6", &Filter{tcp: true, udp: true, only6: true}, false, false},
		{"mapped address", &Filter{tcp: true, udp: true, ifaces: []ifaceAddrs{{addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}}}, false, true},
	} {
		if got := c.f.Match(&web); got != c.web {
			t.Errorf("%s: Match(web) = %v", c.name, got)
		}
		if got := c.f.Match(&dns); got != c.dns {
			t.Errorf("%s: Match(dns) = %v", c.name, got)
		}
	}
}

// TestDefaultNetnsSelectsEveryNamespace: a command whose -n defaults to our
// own namespace (serve, for its latency probes) still selects connections
// of every namespace until -n is given.
func TestDefaultNetnsSelectsEveryNamespace(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{{nil, true}, {[]string{"--netns", "0"}, false}} {
		var o Options
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.Selectors.Register(fs, Help, "0")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		sel, err := o.Selectors.Parse()
		if err != nil {
			t.Fatal(err)
		}
		f, err := o.CompileWith(sel)
		if err != nil {
			t.Fatal(err)
		}
		other := &conn.Record{Proto: "tcp", Netns: 1} // no namespace has inode 1
		if got := f.Match(other); got != c.want {
			t.Errorf("%v: a connection of another namespace matches: %v, want %v", c.args, got, c.want)
		}
	}
}
