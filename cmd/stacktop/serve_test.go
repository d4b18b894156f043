// SPDX-License-Identifier: Apache-2.0

package main

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/testenv"
)

func TestServeBadInputExit2NamingTheProblem(t *testing.T) {
	brokenConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(brokenConfig, []byte("tls_server_config: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--web.listen-address", "localhost"}, `invalid --web.listen-address "localhost": want host:port`},
		{[]string{"--web.listen-address", "127.0.0.1:70000"}, `invalid --web.listen-address "127.0.0.1:70000": port "70000"`},
		{[]string{"--web.config.file", brokenConfig}, `invalid --web.config.file "` + brokenConfig + `"`},
		{[]string{"--web.config.file", "/nonexistent/web.yml"}, "no such file or directory"},
		{[]string{"--web.telemetry-path", "metrics"}, `invalid --web.telemetry-path "metrics"`},
		{[]string{"--web.telemetry-path", "/-/ready"}, `invalid --web.telemetry-path "/-/ready"`},
		{[]string{"--web.telemetry-path", "/{x...}"}, `invalid --web.telemetry-path "/{x...}"`},
		{[]string{"--interval", "0"}, `invalid argument "0" for "--interval" flag: must be from 0.01 to 86400 seconds`},
		{[]string{"--connections.max-tracked", "0"}, `invalid argument "0" for "--connections.max-tracked" flag: must be a whole number from 1 to 4194304`},
		{[]string{"--max-connections", "0"}, `invalid argument "0" for "--connections.max-tracked" flag`}, // the old spelling
		{[]string{"--interval", "soon"}, `invalid argument "soon" for "--interval"`},
		{[]string{"--per-connection-series", "-1"}, `invalid argument "-1" for "--connections.per-connection-series" flag: must be a whole number from 0`},
		{[]string{"-p", "12,x"}, `invalid --pid "x"`},
		{[]string{"-e", "tcp-socket-wait"}, `invalid --enable-probes "tcp-socket-wait"`},
		{[]string{"--port", "70000"}, `invalid --port "70000"`},
		{[]string{"--process", "("}, `invalid --process "("`},
		{[]string{"--udp-idle", "0s"}, `invalid argument "0s" for "--connections.udp-idle" flag: must be from 0.001 to 86400 seconds`},
		{[]string{"--connections.udp-idle", "soon"}, `invalid argument "soon" for "--connections.udp-idle" flag: not a number of seconds`},
		{[]string{"--duration", "-1"}, `invalid argument "-1" for "--duration" flag: must be 0 (until interrupted) or from 0.001`},
		{[]string{"--latency.probes", "tcp-socket-wait"}, `invalid --latency.probes "tcp-socket-wait": unknown probe`},
		{[]string{"--latency.probes", "ip-start", "-e", "tcp-start"}, `invalid --latency.probes "ip-start": cannot be combined with -e`},
		{[]string{"--latency.probes", ","}, `invalid --latency.probes`},
		{[]string{"--no-collector.latency", "--latency.probes", "all"}, `invalid --no-collector.latency "true": cannot be combined with a choice of latency probes`},
		{[]string{"--no-collector.latency", "--no-collector.connections"}, `invalid --no-collector.connections "true": with --no-collector.latency too leaves nothing to export`},
		{[]string{"--collector.latency=maybe"}, `invalid argument "maybe" for "--collector.latency"`},
		{[]string{"--collector.read-wait=maybe"}, `invalid argument "maybe" for "--collector.read-wait"`},
		{[]string{"--collector.read-wait", "--no-collector.connections"}, `invalid --collector.read-wait "true": needs the connections collector`},
		{[]string{"--collector.read-wait", "--latency.probes", "ip-start"}, `invalid --collector.read-wait "true": needs tcp-socket-read or udp-socket-read among the latency probes`},
		{[]string{"--sample", "0"}, `invalid argument "0" for "--sample" flag: must be a whole number from 1 to 1000000`},
		{[]string{"--collector.read-wait", "--sample", "4"}, `invalid --collector.read-wait "true": cannot be combined with --sample 4: read wait adds up every read`},
		{[]string{"--no-collector.latency", "--sample", "4"}, `invalid --no-collector.latency "true": cannot be combined with --sample 4`},
		{[]string{"--latency.compat", "prometheus"}, `invalid --latency.compat "prometheus": the only compatibility mode is ebpf_exporter`},
		{[]string{"--compat", "prometheus"}, `invalid --latency.compat "prometheus"`},
		{[]string{"--connections.max-series", "-1"}, `invalid argument "-1" for "--connections.max-series" flag`},
		{[]string{"--max-series", "x"}, `invalid argument "x" for "--connections.max-series" flag`},
		{[]string{"-4", "-6"}, `invalid --ipv6 "true": cannot be combined with -4/--ipv4`},
		{[]string{"--kubernetes-logs", brokenConfig}, `invalid --kubernetes-logs "` + brokenConfig + `": not a directory`}, // an absent one names nothing
		{[]string{"--web.max-connections", "0"}, `invalid --web.max-connections "0": must be between 1 and 65536`},
		{[]string{"--at", "kprobe:ip_rcv"}, `invalid --at "kprobe:ip_rcv": must be tracepoint:CATEGORY:NAME or fentry:FUNCTION`},
		{[]string{"--no-collector.latency", "--at", "tracepoint:net:netif_receive_skb"}, `invalid --no-collector.latency "true": cannot be combined with --at "tracepoint:net:netif_receive_skb"`},
	}
	for _, c := range cases {
		code, _, stderr := runArgs(append([]string{"stacktop", "serve"}, c.args...)...)
		if code != clierr.ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

func TestServePortInUseExit1(t *testing.T) {
	testenv.RequireRoot(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	code, _, stderr := runArgs("stacktop", "serve", "--web.listen-address", busy.Addr().String())
	want := "error: cannot listen on " + busy.Addr().String() + ": the port is already in use"
	if code != clierr.ExitFailure || !strings.HasPrefix(stderr, want) {
		t.Fatalf("exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
	}
}

// The probe filters select connections too: a record passes when it matches
// one value of each filter given, and stream's own filters as usual.
func TestServeConnectionSelection(t *testing.T) {
	var own unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &own); err != nil {
		t.Fatal(err)
	}
	rec := func(pid uint32, comm, proto, local string, netns uint32) conn.Record {
		return conn.Record{PID: pid, Comm: comm, Proto: proto, LocalAddr: netip.MustParseAddr(local), Netns: netns}
	}
	nginx := rec(10, "nginx", "tcp", "127.0.0.1", uint32(own.Ino))
	cases := []struct {
		args []string
		want map[*conn.Record]bool
	}{
		{[]string{"-p", "10,20", "--process", "^nginx$", "--tcp"}, map[*conn.Record]bool{
			&nginx: true,
			ptr(rec(20, "nginx", "tcp", "127.0.0.1", 1)): true,
			ptr(rec(30, "nginx", "tcp", "127.0.0.1", 1)): false,
			ptr(rec(10, "curl", "tcp", "127.0.0.1", 1)):  false,
			ptr(rec(10, "nginx", "udp", "127.0.0.1", 1)): false,
		}},
		{[]string{"-i", "lo"}, map[*conn.Record]bool{
			&nginx: true,
			ptr(rec(10, "nginx", "tcp", "198.18.100.1", 1)): false,
		}},
		// netstacklat's default -n 0 leaves connections of every namespace in;
		// given explicitly, it selects ours.
		{nil, map[*conn.Record]bool{&nginx: true, ptr(rec(10, "nginx", "tcp", "127.0.0.1", 1)): true}},
		{[]string{"-n", "0"}, map[*conn.Record]bool{&nginx: true, ptr(rec(10, "nginx", "tcp", "127.0.0.1", 1)): false}},
		{[]string{"-n", "-1"}, map[*conn.Record]bool{&nginx: true, ptr(rec(10, "nginx", "tcp", "127.0.0.1", 1)): true}},
	}
	for _, tc := range cases {
		var o serveOptions
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		o.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		c, err := o.config()
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		for r, want := range tc.want {
			if got := c.conns.Filter.Match(r); got != want {
				t.Errorf("%v: pid %d comm %s %s %s netns %d: selected %v, want %v",
					tc.args, r.PID, r.Comm, r.Proto, r.LocalAddr, r.Netns, got, want)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// --latency.compat ebpf_exporter (--compat before) listens on ebpf_exporter's port (on loopback, as
// serve's own default) unless --web.listen-address says otherwise.
func TestServeCompatDefaultAddress(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "127.0.0.1:9877"},
		{[]string{"--compat", "ebpf_exporter"}, "127.0.0.1:9435"},
		{[]string{"--latency.compat", "ebpf_exporter", "--web.listen-address", ":9435"}, ":9435"},
	} {
		var o serveOptions
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		o.register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if _, err := o.config(); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if got := strings.Join(o.web.ListenAddresses, ","); got != c.want {
			t.Errorf("%v: listens on %s, want %s", c.args, got, c.want)
		}
	}
}
