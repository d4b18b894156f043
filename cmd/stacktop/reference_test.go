// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/latency"
)

// TestCLIReferenceIsCurrent: docs/cli/ is what `stacktop markdown` writes
// from the commands' flags and help, file for file; after a change to
// either, `make cli-docs` writes it again.
func TestCLIReferenceIsCurrent(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := runArgs("stacktop", "markdown", dir); code != 0 {
		t.Fatalf("stacktop markdown: exit %d: %s", code, stderr)
	}
	want := readDir(t, dir)
	got := readDir(t, "../../docs/cli")
	for name, text := range want {
		if got[name] != text {
			t.Errorf("docs/cli/%s is not what the commands say: run make cli-docs", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("docs/cli/%s documents no command: run make cli-docs", name)
		}
	}
	// A --no-X flag is an action: "(default true)" on it read backwards.
	for _, line := range strings.Split(want["stacktop_serve.md"], "\n") {
		if strings.Contains(line, "--no-collector.") && strings.Contains(line, "(default") {
			t.Errorf("serve's help shows a default for a negation: %s", line)
		}
	}
	if !strings.Contains(want["stacktop_serve.md"], "--no-collector.read-wait ") {
		t.Error("serve's help lacks --no-collector.read-wait")
	}
	for _, name := range []string{"stacktop.md", "stacktop_top.md", "stacktop_stream.md", "stacktop_latency.md", "stacktop_serve.md", "stacktop_doctor.md"} {
		if !strings.Contains(want[name], "### Exit status\n") || !strings.Contains(want[name], "| 77 | missing privileges") {
			t.Errorf("%s has no exit status section:\n%s", name, want[name])
		}
	}
}

func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(b)
	}
	return files
}

// TestManPagesHaveExitStatusAndExamples: every page has EXIT STATUS, and
// those of the commands users run have EXAMPLES.
func TestManPagesHaveExitStatusAndExamples(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := runArgs("stacktop", "man", dir); code != 0 {
		t.Fatalf("stacktop man: exit %d: %s", code, stderr)
	}
	for _, page := range []string{"stacktop.1", "stacktop-top.1", "stacktop-stream.1", "stacktop-latency.1", "stacktop-serve.1", "stacktop-doctor.1", "stacktop-version.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		exit, examples, seeAlso := strings.Index(s, ".SH EXIT STATUS\n"), strings.Index(s, ".SH EXAMPLES\n"), strings.Index(s, ".SH SEE ALSO\n")
		if exit < 0 || examples < 0 || !(exit < seeAlso) || !strings.Contains(s, ".B 77\nmissing privileges") || strings.Contains(s, ".SH EXAMPLE\n") {
			t.Errorf("%s: EXIT STATUS at %d, EXAMPLES at %d, SEE ALSO at %d:\n%s", page, exit, examples, seeAlso, s)
		}
	}
}

// TestCompletionOffersEnumeratedValues asks cobra's hidden __complete
// command, as the shell scripts of `stacktop completion` do.
func TestCompletionOffersEnumeratedValues(t *testing.T) {
	var probes []string
	for _, h := range latency.Hooks {
		probes = append(probes, h.String())
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"stacktop", "__complete", "stream", "--format", ""}, []string{"text", "json", "csv"}},
		{[]string{"stacktop", "__complete", "latency", "--format", ""}, []string{"text", "json"}},
		{[]string{"stacktop", "__complete", "doctor", "--format", ""}, []string{"text", "json"}},
		{[]string{"stacktop", "__complete", "stream", "--backend", ""}, []string{"auto", "fentry", "tracepoint"}},
		{[]string{"stacktop", "__complete", "latency", "--backend", ""}, []string{"auto", "fentry", "tracepoint"}},
		{[]string{"stacktop", "__complete", "latency", "-e", ""}, probes},
		{[]string{"stacktop", "__complete", "serve", "--disable-probes", "ip-start,tcp-start,"},
			prefixed("ip-start,tcp-start,", slices.DeleteFunc(slices.Clone(probes), func(p string) bool { return p == "ip-start" || p == "tcp-start" }))},
		{[]string{"stacktop", "__complete", "serve", "--latency.probes", ""}, append(slices.Clone(probes), "all")},
		{[]string{"stacktop", "__complete", "serve", "--latency.compat", ""}, []string{"ebpf_exporter"}},
		{[]string{"stacktop", "__complete", "--log.level", ""}, []string{"debug", "info", "warn", "error"}},
		{[]string{"stacktop", "__complete", "serve", "--log.format", ""}, []string{"logfmt", "json"}},
		{[]string{"netstacklat", "__complete", "--format", ""}, []string{"text", "json"}},
	} {
		code, stdout, stderr := runArgs(c.args...)
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		if code != 0 || len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], ":") {
			t.Errorf("%v: exit %d, %q %q", c.args, code, stdout, stderr)
			continue
		}
		if got := lines[:len(lines)-1]; !slices.Equal(got, c.want) {
			t.Errorf("%v offers %q, want %q", c.args, got, c.want)
		}
	}
	// Sort keys: every column --sort takes, read wait included.
	for _, prog := range []string{"stacktop", "tcptop"} {
		args := []string{prog, "__complete", "top", "--sort", ""}
		if prog == "tcptop" {
			args = []string{prog, "__complete", "--sort", ""}
		}
		_, stdout, _ := runArgs(args...)
		for _, key := range []string{"rtt", "rate-in", "process", "read-wait"} {
			if !slices.Contains(strings.Split(stdout, "\n"), key) {
				t.Errorf("%v lacks %s: %q", args, key, stdout)
			}
		}
	}
}

func prefixed(prefix string, values []string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = prefix + v
	}
	return out
}

// TestOldSpellingsDocumented: docs/CLI.md's table names every alias the
// code keeps, and the flag each now stands for.
func TestOldSpellingsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	rows := map[string]string{"max-connections": "max-tracked", "log-level": "log.level"}
	for old, now := range serveAliases {
		rows[old] = now
	}
	for old, now := range rows {
		if row := "| `--" + old + "` | `--" + now + "` |"; !strings.Contains(doc, row) {
			t.Errorf("docs/CLI.md lacks the row %s", row)
		}
	}
}

// TestOldSpellingsStillWork: each alias sets the flag it stands for, on
// the command that had it.
func TestOldSpellingsStillWork(t *testing.T) {
	for _, c := range []struct{ cmd, old, now, value string }{
		{"stream", "max-connections", "max-tracked", "16"},
		{"top", "max-connections", "max-tracked", "16"},
		{"serve", "max-connections", "connections.max-tracked", "16"},
		{"serve", "udp-idle", "connections.udp-idle", "7"},
		{"serve", "per-connection-series", "connections.per-connection-series", "3"},
		{"serve", "max-series", "connections.max-series", "50"},
		{"serve", "bpf-stats", "bpf.stats", "true"},
		{"serve", "compat", "latency.compat", "ebpf_exporter"},
		{"latency", "report-interval", "interval", "2"},
	} {
		cmd, _, err := newRootCmd().Find([]string{c.cmd})
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags([]string{"--" + c.old + "=" + c.value}); err != nil {
			t.Errorf("%s --%s: %v", c.cmd, c.old, err)
			continue
		}
		f := cmd.Flags().Lookup(c.now)
		if !f.Changed || f.Value.String() == f.DefValue {
			t.Errorf("%s --%s=%s left --%s at %s", c.cmd, c.old, c.value, c.now, f.Value)
		}
	}
}
