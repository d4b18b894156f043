// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestPrivilegesNameWhatIsMissing runs the real binary, under the names it
// is installed as, with capability sets cut by setpriv: each command asks
// only for what its hooks need, names what is missing and exits 77, and
// what it can do with what it has, it does.
func TestPrivilegesNameWhatIsMissing(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv := testenv.RequireTool(t, "setpriv")
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tcptop", "netstacklat"} {
		if err := os.Symlink(testenv.Binary(t), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	nobody := []string{"--reuid=65534", "--regid=65534", "--clear-groups"}
	bpfOnly := append([]string{"--inh-caps=-all,+bpf,+perfmon", "--ambient-caps=-all,+bpf,+perfmon"}, nobody...)
	droppedRoot := []string{"--bounding-set=-all", "--inh-caps=-all"}
	const (
		loadCaps = "CAP_BPF and CAP_PERFMON (to load BPF programs; CAP_SYS_ADMIN also does)"
		netAdmin = "CAP_NET_ADMIN (to attach the "
		asRoot   = "Run it as root (sudo "
		dropped  = "although it runs as root: its capabilities were dropped"
	)
	cases := []struct {
		name     string
		as       []string
		args     []string // args[0] is the program: stacktop, tcptop or netstacklat
		code     int
		want     []string // in stderr (or stdout for exit 0)
		dontWant []string
	}{
		{"doctor as nobody", nobody, []string{"stacktop", "doctor"}, clierr.ExitPrivileges,
			[]string{"error: stacktop needs " + loadCaps + ", which this process lacks. " + asRoot + "stacktop"}, []string{"NET_ADMIN"}},
		// Connection tracking needs CAP_NET_ADMIN: doctor says so in its
		// verdict and exits 1, where a refused backend that another stands
		// in for would not.
		{"doctor with CAP_BPF and CAP_PERFMON", bpfOnly, []string{"stacktop", "doctor"}, clierr.ExitFailure,
			[]string{"error: top/stream, serve cannot run here: see the verdict above"}, nil},
		{"tcptop as nobody", nobody, []string{"tcptop", "--count", "1"}, clierr.ExitPrivileges,
			[]string{"error: tcptop needs " + loadCaps + " and " + netAdmin + "cgroup_skb", asRoot + "tcptop"}, nil},
		{"stream with CAP_BPF and CAP_PERFMON", bpfOnly, []string{"stacktop", "stream", "--count", "1"}, clierr.ExitPrivileges,
			[]string{"error: stacktop needs " + netAdmin + "cgroup_skb"}, []string{"CAP_BPF", "CAP_PERFMON"}},
		{"netstacklat with CAP_BPF and CAP_PERFMON", bpfOnly, []string{"netstacklat", "--count", "1"}, clierr.ExitPrivileges,
			[]string{"error: netstacklat needs " + netAdmin + "netfilter hooks"}, []string{"CAP_BPF"}},
		{"socket probes with CAP_BPF and CAP_PERFMON", bpfOnly, []string{"netstacklat", "-e", "tcp-socket-read,udp-socket-enqueued", "--count", "1", "-r", "0.1"}, 0,
			nil, nil},
		{"netstacklat -l as nobody", nobody, []string{"netstacklat", "-l"}, 0,
			[]string{"tcp-socket-read      yes      unknown", "backends unknown: they are learnt by attaching each probe, and netstacklat needs " + loadCaps}, nil},
		{"root without capabilities", droppedRoot, []string{"stacktop", "latency", "--count", "1"}, clierr.ExitPrivileges,
			[]string{"error: stacktop needs " + loadCaps + " and " + netAdmin + "netfilter hooks", dropped}, []string{"RLIMIT_MEMLOCK"}},
		{"tcptop as root without capabilities", droppedRoot, []string{"tcptop", "--count", "1"}, clierr.ExitPrivileges,
			[]string{"error: tcptop needs " + loadCaps, dropped}, []string{"RLIMIT_MEMLOCK"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prog := testenv.Binary(t)
			if c.args[0] != "stacktop" {
				prog = filepath.Join(dir, c.args[0])
			}
			cmd := exec.Command(setpriv, append(append(c.as, "--", prog), c.args[1:]...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			code := 0
			if err := cmd.Run(); err != nil {
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Fatal(err)
				}
				code = ee.ExitCode()
			}
			text := stderr.String()
			if code == 0 {
				text = stdout.String()
			}
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr %q", code, c.code, stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("output lacks %q:\n%s", w, text)
				}
			}
			for _, w := range c.dontWant {
				if strings.Contains(text, w) {
					t.Errorf("output says %q:\n%s", w, text)
				}
			}
		})
	}
}
