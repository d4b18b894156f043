// SPDX-License-Identifier: Apache-2.0

package deploy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"

	"github.com/stacktop/stacktop/internal/testenv"
)

// These tests build the three packages of docs/PACKAGING.md with the
// Makefile's own targets, as a release would, and check each with the tool
// that will consume it: lintian and dpkg for the .deb, buildah for the image,
// helm for the chart.

// runMake runs `make ARGS` at the repository's root and returns its stdout.
func runMake(t *testing.T, args ...string) string {
	t.Helper()
	testenv.RequireTool(t, "make")
	testenv.RequireTool(t, "go")
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// releaseVersion is the VERSION file's version, which every package reports.
func releaseVersion(t *testing.T) string {
	t.Helper()
	v, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(v))
}

// lastLine is the .deb's path that scripts/deb.sh prints last.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestDeb(t *testing.T) {
	for _, tool := range []string{"dpkg-deb", "lintian", "file"} {
		testenv.RequireTool(t, tool)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "stacktop")
	deb := lastLine(runMake(t, "deb", "BIN="+bin, "DIST="+filepath.Join(dir, "a")))

	// Reproducible: the same commit gives the same bytes.
	again := lastLine(runMake(t, "deb", "BIN="+bin, "DIST="+filepath.Join(dir, "b")))
	first, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(again)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(deb) != filepath.Base(again) || !bytes.Equal(first, second) {
		t.Errorf("two builds of one commit differ: %s (%d bytes), %s (%d bytes)", deb, len(first), again, len(second))
	}

	// Every error and warning lintian has is fixed or overridden with a
	// reason (deploy/debian/lintian-overrides).
	out, err := exec.Command("lintian", "--fail-on", "error,warning", deb).CombinedOutput()
	if err != nil {
		t.Errorf("lintian: %v\n%s", err, out)
	}

	// The binary is the one make built, and every name of it runs its command.
	root := filepath.Join(dir, "root")
	run(t, "dpkg-deb", "-x", deb, root)
	built, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	packaged, err := os.ReadFile(filepath.Join(root, "usr/bin/stacktop"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(built, packaged) {
		t.Error("usr/bin/stacktop is not the binary make build made")
	}
	release := releaseVersion(t)
	commit := strings.TrimSpace(run(t, "git", "rev-parse", "HEAD"))
	for _, flag := range []string{"version", "--version"} {
		// "stacktop VERSION", then the commit make linked in.
		if v := run(t, filepath.Join(root, "usr/bin/stacktop"), flag); !strings.HasPrefix(v, "stacktop "+release+"\ncommit "+commit+"\n") {
			t.Errorf("stacktop %s says %q, want version %q (the VERSION file) and commit %s", flag, v, release, commit)
		}
	}
	if !strings.HasPrefix(filepath.Base(deb), "stacktop_"+release+"_") {
		t.Errorf("package %s is not version %s", filepath.Base(deb), release)
	}
	for name, sub := range map[string]string{"tcptop": "top", "netstacklat": "latency"} {
		// The same description opens both helps; the usage lines may differ
		// in the name.
		want, _, _ := strings.Cut(run(t, filepath.Join(root, "usr/bin/stacktop"), sub, "--help"), "\n")
		if help := run(t, filepath.Join(root, "usr/bin", name), "--help"); !strings.HasPrefix(help, want+"\n") {
			t.Errorf("%s --help is not stacktop %s's (%q):\n%s", name, sub, want, help)
		}
	}

	// A man page for every command and every name in /usr/bin, and the
	// three shells' completions.
	commands := []string{"stacktop"}
	help := run(t, filepath.Join(root, "usr/bin/stacktop"), "--help")
	_, list, _ := strings.Cut(help, "Available Commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	for _, line := range strings.Split(list, "\n") {
		// completion and help come from cobra, and have no page.
		if f := strings.Fields(line); len(f) > 0 && f[0] != "completion" && f[0] != "help" {
			commands = append(commands, "stacktop-"+f[0])
		}
	}
	if len(commands) < 6 {
		t.Fatalf("found only %v in stacktop --help", commands)
	}
	for _, page := range append(commands, "tcptop", "netstacklat") {
		path := filepath.Join(root, "usr/share/man/man1", page+".1.gz")
		if out, err := exec.Command("man", "--warnings", "-l", "-E", "UTF-8", path).CombinedOutput(); err != nil || !strings.Contains(string(out), "stacktop") {
			t.Errorf("man page %s: %v\n%.300s", page, err, out)
		}
	}
	for path, want := range map[string]string{
		"usr/share/bash-completion/completions/stacktop":    "__start_stacktop",
		"usr/share/zsh/vendor-completions/_stacktop":        "#compdef stacktop",
		"usr/share/fish/vendor_completions.d/stacktop.fish": "complete -c stacktop",
		"usr/lib/systemd/system/stacktop.service":           "\nExecStart=/usr/bin/stacktop serve ",
		"usr/share/man/man1/stacktop-serve.1.gz":            "latency.probes",
	} {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err == nil && strings.HasSuffix(path, ".gz") {
			var z *gzip.Reader
			if z, err = gzip.NewReader(bytes.NewReader(b)); err == nil {
				b, err = io.ReadAll(z)
			}
		}
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q (%v)", path, want, err)
		}
	}
	if unit, _ := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/stacktop.service")); bytes.Contains(unit, []byte("/usr/local")) {
		t.Errorf("the packaged unit still names /usr/local:\n%s", unit)
	}
}

func TestImage(t *testing.T) {
	testenv.RequireRoot(t) // buildah's storage under /var/lib/containers
	buildah := testenv.RequireTool(t, "buildah")
	dir := t.TempDir()
	image := fmt.Sprintf("localhost/stacktop-test:%d", os.Getpid())
	build := func() string {
		runMake(t, "image", "BIN="+filepath.Join(dir, "stacktop"), "IMAGE="+image)
		return strings.TrimSpace(run(t, buildah, "inspect", "--format", "{{.FromImageID}}", image))
	}
	id := build()
	t.Cleanup(func() { exec.Command(buildah, "rmi", "--force", image).Run() })
	if len(id) != 64 {
		t.Fatalf("image ID %q", id)
	}
	if again := build(); again != id {
		t.Errorf("two builds of one commit give images %s and %s", id, again)
	}

	// Nothing but the binary, started by the entrypoint with serve's
	// arguments by default.
	config := run(t, buildah, "inspect", "--format",
		"{{.OCIv1.Config.Entrypoint}} {{.OCIv1.Config.Cmd}} {{len .OCIv1.RootFS.DiffIDs}} {{.OCIv1.Config.ExposedPorts}}\n", image)
	if want := "[/usr/bin/stacktop] [serve --web.listen-address=:9877] 1 map[9877/tcp:{}]\n"; config != want {
		t.Errorf("image config %q, want %q", config, want)
	}
	labels := run(t, buildah, "inspect", "--format",
		`{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}|{{index .OCIv1.Config.Labels "org.opencontainers.image.licenses"}}`, image)
	if want := releaseVersion(t) + "|Apache-2.0 AND (GPL-2.0-only OR BSD-2-Clause)"; strings.TrimSpace(labels) != want {
		t.Errorf("image version|licenses labels %q, want %q", labels, want)
	}
	ctr := strings.TrimSpace(run(t, buildah, "from", image))
	t.Cleanup(func() { exec.Command(buildah, "rm", ctr).Run() })
	mnt := strings.TrimSpace(run(t, buildah, "mount", ctr))
	var files []string
	filepath.WalkDir(mnt, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, strings.TrimPrefix(path, mnt))
		}
		return err
	})
	run(t, buildah, "umount", ctr)
	if !slices.Equal(files, []string{"/usr/bin/stacktop"}) {
		t.Errorf("image files %v, want only /usr/bin/stacktop", files)
	}
	// The default command's flags parse (--help after them), and version
	// runs. chroot isolation: buildah needs no OCI runtime for it.
	for _, args := range [][]string{{"serve", "--web.listen-address=:9877", "--help"}, {"version"}} {
		out := run(t, buildah, append([]string{"run", "--isolation", "chroot", ctr, "--", "/usr/bin/stacktop"}, args...)...)
		if !strings.Contains(out, "stacktop") {
			t.Errorf("stacktop %v in the image: %s", args, out)
		}
	}
}

// daemonSet returns the DaemonSet of a multi-document manifest.
func daemonSet(t *testing.T, manifest []byte) map[any]any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(manifest))
	for {
		var doc map[any]any
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("no DaemonSet in the manifest: %v\n%s", err, manifest)
		}
		if doc["kind"] == "DaemonSet" {
			return doc
		}
	}
}

// get follows keys (string for maps, int for lists) into a decoded document.
func get(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, _ := v.(map[any]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// differences lists where two decoded documents differ, each as the path
// and both values, so a chart that drifted from the manifest says where.
func differences(path string, got, want any) []string {
	if reflect.DeepEqual(got, want) {
		return nil
	}
	var diffs []string
	switch w := want.(type) {
	case map[any]any:
		if g, ok := got.(map[any]any); ok {
			for k := range mergeKeys(g, w) {
				diffs = append(diffs, differences(fmt.Sprintf("%s.%v", path, k), g[k], w[k])...)
			}
			slices.Sort(diffs)
			return diffs
		}
	case []any:
		if g, ok := got.([]any); ok && len(g) == len(w) {
			for i := range w {
				diffs = append(diffs, differences(fmt.Sprintf("%s[%d]", path, i), g[i], w[i])...)
			}
			return diffs
		}
	}
	return []string{fmt.Sprintf("%s: chart %v, daemonset.yaml %v", path, got, want)}
}

func mergeKeys(a, b map[any]any) map[any]bool {
	keys := map[any]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

func TestHelmChart(t *testing.T) {
	testenv.RequireTool(t, "go")
	helm := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command("go", append([]string{"tool", "helm"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
		}
		return out
	}
	dist := t.TempDir()
	runMake(t, "chart", "DIST="+dist)
	tgz, _ := filepath.Glob(filepath.Join(dist, "stacktop-*.tgz"))
	if len(tgz) != 1 {
		t.Fatalf("make chart packaged %v", tgz)
	}
	release := releaseVersion(t)
	var chart map[string]any
	if err := yaml.Unmarshal(helm("show", "chart", tgz[0]), &chart); err != nil || fmt.Sprint(chart["appVersion"]) != release {
		t.Errorf("packaged chart's appVersion is %v, not the VERSION file's %q (%v)", chart["appVersion"], release, err)
	}

	// With its defaults the chart renders the pod of
	// kubernetes/daemonset.yaml, but for the image it names.
	plain, err := os.ReadFile("kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := daemonSet(t, plain)
	got := daemonSet(t, helm("template", "stacktop", "helm/stacktop", "--namespace", "stacktop"))
	container := get(got, "spec", "template", "spec", "containers", 0).(map[any]any)
	delete(container, "imagePullPolicy")
	container["image"] = get(want, "spec", "template", "spec", "containers", 0, "image")
	for _, path := range [][]any{
		{"spec", "template", "spec"},
		{"spec", "template", "metadata", "annotations"},
		{"spec", "updateStrategy"},
		{"metadata", "namespace"},
	} {
		for _, d := range differences(fmt.Sprint(path), get(got, path...), get(want, path...)) {
			t.Errorf("chart and kubernetes/daemonset.yaml differ at %s", d)
		}
	}

	// The values that change the pod do.
	custom := daemonSet(t, helm("template", "st", "helm/stacktop", "--namespace", "mon",
		"--set", "port=9435", "--set", "image.tag=v1.2.3", "--set", "seccompProfile=Unconfined",
		"--set-json", `extraArgs=["--latency.compat","ebpf_exporter"]`))
	c := get(custom, "spec", "template", "spec", "containers", 0)
	for _, check := range []struct {
		path []any
		want any
	}{
		{[]any{"args"}, []any{"serve", "--web.listen-address=:9435", "--latency.compat", "ebpf_exporter"}},
		{[]any{"ports", 0, "containerPort"}, 9435},
		{[]any{"ports", 0, "hostPort"}, 9435},
		{[]any{"image"}, "ghcr.io/stacktop/stacktop:v1.2.3"},
		{[]any{"securityContext", "seccompProfile", "type"}, "Unconfined"},
	} {
		if g := get(c, check.path...); !reflect.DeepEqual(g, check.want) {
			t.Errorf("container's %v = %v, want %v", check.path, g, check.want)
		}
	}
	if g := get(custom, "spec", "template", "metadata", "annotations", "prometheus.io/port"); g != "9435" {
		t.Errorf("prometheus.io/port annotation %v, want 9435", g)
	}
	if g := get(custom, "metadata", "namespace"); g != "mon" {
		t.Errorf("namespace %v, want the release's, mon", g)
	}
}
