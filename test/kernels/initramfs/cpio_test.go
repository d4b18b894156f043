// SPDX-License-Identifier: Apache-2.0

package initramfs

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/testenv"
)

// TestBusyboxReadsTheArchive checks the archive with an independent cpio
// reader, busybox's (installed by scripts/deps.sh for the guests anyway).
func TestBusyboxReadsTheArchive(t *testing.T) {
	busybox := testenv.RequireTool(t, "busybox")
	tree := t.TempDir()
	src := filepath.Join(tree, "src")
	if err := os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tree, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "sub", "golden.txt"), []byte("golden"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.CharDevice("dev/console", 5, 1)
	w.File("/etc/plan.json", 0o644, []byte(`{"odd":"length"}`))
	w.CopyFile("suites/a.test", src)
	w.Symlink("bin/sh", "busybox")
	w.Dir("run")
	if err := w.CopyTree("src/pkg/testdata", tree); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command(busybox, "cpio", "-i", "-d")
	cmd.Dir, cmd.Stdin = out, zr
	if msg, err := cmd.CombinedOutput(); err != nil {
		// Creating the device node needs root; everything else must unpack.
		if !strings.Contains(string(msg), "dev/console") {
			t.Fatalf("busybox cpio: %v: %s", err, msg)
		}
	}
	if b, err := os.ReadFile(filepath.Join(out, "etc/plan.json")); err != nil || string(b) != `{"odd":"length"}` {
		t.Errorf("etc/plan.json = %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(out, "suites/a.test")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("suites/a.test: %v %v", st, err)
	}
	if target, err := os.Readlink(filepath.Join(out, "bin/sh")); err != nil || target != "busybox" {
		t.Errorf("bin/sh -> %q, %v", target, err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "src/pkg/testdata/sub/golden.txt")); err != nil || string(b) != "golden" {
		t.Errorf("copied tree: %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(out, "run")); err != nil || !st.IsDir() {
		t.Errorf("run: %v %v", st, err)
	}
	if os.Geteuid() == 0 {
		if st, err := os.Stat(filepath.Join(out, "dev/console")); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("dev/console: %v %v", st, err)
		}
	}
}
