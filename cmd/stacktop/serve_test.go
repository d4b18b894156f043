package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

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
		{[]string{"--interval", "0"}, `invalid --interval "0s": must be positive`},
		{[]string{"--interval", "soon"}, `invalid argument "soon" for "--interval"`},
		{[]string{"--per-connection-series", "-1"}, `invalid --per-connection-series "-1"`},
		{[]string{"-p", "12,x"}, `invalid --pid "x"`},
		{[]string{"-e", "tcp-socket-wait"}, `invalid --enable-probes "tcp-socket-wait"`},
		{[]string{"--port", "70000"}, `invalid --port "70000"`},
		{[]string{"--process", "("}, `invalid --process "("`},
		{[]string{"--udp-idle", "0s"}, `invalid --udp-idle "0s"`},
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
	var o serveOptions
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.register(fs)
	if err := fs.Parse([]string{"-p", "10,20", "--process", "^nginx$", "--tcp"}); err != nil {
		t.Fatal(err)
	}
	_, _, sel, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	rec := func(pid uint32, comm, proto string) *conn.Record {
		return &conn.Record{PID: pid, Comm: comm, Proto: proto}
	}
	for _, c := range []struct {
		r    *conn.Record
		want bool
	}{
		{rec(10, "nginx", "tcp"), true},
		{rec(20, "nginx", "tcp"), true},
		{rec(30, "nginx", "tcp"), false},
		{rec(10, "curl", "tcp"), false},
		{rec(10, "nginx", "udp"), false},
	} {
		if got := sel.match(c.r); got != c.want {
			t.Errorf("pid %d comm %s proto %s: selected %v, want %v", c.r.PID, c.r.Comm, c.r.Proto, got, c.want)
		}
	}
}
