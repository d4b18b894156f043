package deploy

import (
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/testenv"
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// make deb builds a package that lintian finds no error or warning in, with
// the binary (and its tcptop/netstacklat names), the systemd unit pointing at
// it, man pages generated from the CLI and the shell completions.
func TestDebianPackage(t *testing.T) {
	testenv.RequireTool(t, "dpkg-deb")
	lintian := testenv.RequireTool(t, "lintian")
	out := t.TempDir()
	cmd := exec.Command("../scripts/deb.sh", out)
	cmd.Env = append(os.Environ(), "VERSION=1.2.3")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/deb.sh: %v\n%s", err, b)
	}
	deb := filepath.Join(out, "stacktop_1.2.3_"+strings.TrimSpace(run(t, "dpkg", "--print-architecture"))+".deb")
	run(t, lintian, "--fail-on", "error,warning", deb)
	root := t.TempDir()
	run(t, "dpkg-deb", "-x", deb, root)
	for _, f := range []string{
		"usr/bin/stacktop", "usr/bin/tcptop", "usr/bin/netstacklat",
		"usr/lib/systemd/system/stacktop.service",
		"usr/share/man/man1/stacktop.1.gz", "usr/share/man/man1/stacktop-serve.1.gz", "usr/share/man/man1/tcptop.1.gz",
		"usr/share/bash-completion/completions/stacktop", "usr/share/zsh/vendor-completions/_stacktop",
		"usr/share/fish/vendor_completions.d/stacktop.fish", "usr/share/doc/stacktop/copyright",
	} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("package lacks %s: %v", f, err)
		}
	}
	if v := run(t, filepath.Join(root, "usr/bin/stacktop"), "--version"); !strings.HasPrefix(v, "stacktop 1.2.3\n") {
		t.Errorf("packaged binary --version: %q", v)
	}
	unit, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/stacktop.service"))
	if err != nil || !strings.Contains(string(unit), "\nExecStart=/usr/bin/stacktop serve ") || strings.Contains(string(unit), "/usr/local") {
		t.Errorf("packaged unit must run /usr/bin/stacktop (%v):\n%s", err, unit)
	}
	f, err := os.Open(filepath.Join(root, "usr/share/man/man1/stacktop-serve.1.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(z)
	if err != nil || !strings.Contains(string(page), "latency.probes") {
		t.Errorf("man page of serve lacks --latency.probes (%v)", err)
	}
}

// The container image builds offline from the static binary alone, and the
// binary runs in it.
func TestContainerImage(t *testing.T) {
	testenv.RequireRoot(t)
	buildah := testenv.RequireTool(t, "buildah")
	ctx := t.TempDir()
	bin, err := os.ReadFile(testenv.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "stacktop"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	image := "localhost/stacktop-test-" + filepath.Base(ctx)
	run(t, buildah, "build", "--isolation", "chroot", "-q", "-f", "container/Containerfile", "-t", image, ctx)
	t.Cleanup(func() { exec.Command(buildah, "rmi", "-f", image).Run() })
	if cfg := run(t, buildah, "inspect", "--type", "image", "--format",
		"{{.OCIv1.Config.Entrypoint}} {{.OCIv1.Config.Cmd}} {{len .OCIv1.RootFS.DiffIDs}}", image); strings.TrimSpace(cfg) != "[/stacktop] [serve --web.listen-address=:9877] 1" {
		t.Errorf("image config %q: want entrypoint /stacktop, serve on :9877, one layer", cfg)
	}
	ctr := strings.TrimSpace(run(t, buildah, "from", image))
	t.Cleanup(func() { exec.Command(buildah, "rm", ctr).Run() })
	if v := run(t, buildah, "run", "--isolation", "chroot", ctr, "/stacktop", "--version"); !strings.HasPrefix(v, "stacktop ") {
		t.Errorf("stacktop --version in the image: %q", v)
	}
}
