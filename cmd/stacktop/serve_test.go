package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/clierr"
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
