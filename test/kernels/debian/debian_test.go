// SPDX-License-Identifier: Apache-2.0

package debian

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/testenv"
)

func TestParseMeta(t *testing.T) {
	for _, tc := range []struct{ record, release, version string }{
		{"Package: linux-image-cloud-amd64\nVersion: 6.1.176-1\nDepends: linux-image-6.1.0-50-cloud-amd64 (= 6.1.176-1)\n",
			"6.1.0-50-cloud-amd64", "6.1.176-1"},
		// sid's meta-package depends on linux-base first; two records: the first wins.
		{"Package: linux-image-cloud-amd64\nVersion: 7.2.13-1\nDepends: linux-base-cloud-amd64 (= 7.2.13-1), linux-image-7.2.13+deb14-cloud-amd64 (= 7.2.13-1)\n\n" +
			"Package: linux-image-cloud-amd64\nVersion: 7.1.2-1\nDepends: linux-image-7.1.2+deb14-cloud-amd64 (= 7.1.2-1)\n",
			"7.2.13+deb14-cloud-amd64", "7.2.13-1"},
	} {
		release, version, err := ParseMeta(tc.record)
		if err != nil || release != tc.release || version != tc.version {
			t.Errorf("ParseMeta = %q %q %v, want %q %q", release, version, err, tc.release, tc.version)
		}
	}
	if _, _, err := ParseMeta("Package: linux-image-cloud-amd64\nVersion: 1\nDepends: linux-base\n"); err == nil {
		t.Error("record without a linux-image dependency accepted")
	}
}

func TestFindMirror(t *testing.T) {
	deb822 := `Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm
`
	oneLine := "deb http://other.example/debian-security bookworm-security main\n" +
		"# deb http://commented.example/debian bookworm main\n" +
		"deb [arch=amd64 signed-by=/k.gpg] https://mirror.example/debian/ bookworm main\n"
	for in, want := range map[string]string{
		deb822:  "http://mirror.example/debian",
		oneLine: "https://mirror.example/debian",
		"deb https://packages.example/apt stable main\n": "",
	} {
		if got := FindMirror(in); got != want {
			t.Errorf("FindMirror(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSourcesListHasEverySuite(t *testing.T) {
	got := SourcesList("http://mirror.example/debian")
	want := ""
	for _, k := range Kernels {
		want += "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian " + k.Suite + " main\n"
	}
	if got != want {
		t.Errorf("sources list\n%s\nwant\n%s", got, want)
	}
}

// fakeModule compiles an object whose .modinfo says depends=deps, which is
// all the resolver reads of a module.
func fakeModule(t *testing.T, path, deps string) {
	t.Helper()
	clang := testenv.RequireTool(t, "clang")
	src := filepath.Join(t.TempDir(), "m.c")
	code := `__attribute__((section(".modinfo"), used)) static const char d[] = "license=GPL\0depends=` + deps + `\0";`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(clang, "-c", "-o", path, src).CombinedOutput(); err != nil {
		t.Fatalf("clang: %v: %s", err, out)
	}
}

func TestModulesInDependencyOrder(t *testing.T) {
	root := t.TempDir()
	mods := filepath.Join(root, "lib", "modules", "9.9.9-test")
	xz := testenv.RequireTool(t, "xz")
	fakeModule(t, filepath.Join(mods, "kernel/drivers/net/veth.ko"), "")
	fakeModule(t, filepath.Join(mods, "kernel/net/nf-a.ko"), "veth,builtin_one")
	fakeModule(t, filepath.Join(mods, "kernel/net/b.ko"), "nf_a")
	if out, err := exec.Command(xz, filepath.Join(mods, "kernel/net/b.ko")).CombinedOutput(); err != nil {
		t.Fatalf("xz: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(mods, "modules.builtin"), []byte("kernel/lib/builtin-one.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := &Image{Release: "9.9.9-test", ModulesDir: mods}
	got, err := img.Modules([]string{"b", "veth", "builtin-one"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range got {
		names = append(names, m.Name)
		if filepath.Ext(m.Path) != ".ko" {
			t.Errorf("module %s not decompressed: %s", m.Name, m.Path)
		}
	}
	if want := []string{"veth", "nf_a", "b"}; !reflect.DeepEqual(names, want) {
		t.Errorf("load order %v, want %v", names, want)
	}
	if _, err := img.Modules([]string{"missing"}); err == nil {
		t.Error("unknown module accepted")
	}
}

func TestPruneKeepsWhatSuitesPointAt(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	files := map[string]string{
		"suites/bookworm":                            "6.1.0-50-cloud-amd64 6.1.176-1\n",
		"suites/sid":                                 "7.2.13+deb14-cloud-amd64 7.2.13-1\n",
		"kernels/6.1.0-50-cloud-amd64/.complete":     "",
		"kernels/6.1.0-47-cloud-amd64/.complete":     "",
		"kernels/7.2.13+deb14-cloud-amd64/.complete": "",
		"debs/linux-image-6.1.0-50-cloud-amd64-unsigned_6.1.176-1_amd64.deb":     "",
		"debs/linux-image-6.1.0-47-cloud-amd64-unsigned_6.1.170-1_amd64.deb":     "",
		"debs/linux-modules-7.2.13+deb14-cloud-amd64_7.2.13-1_amd64.deb":         "",
		"debs/linux-binary-unsigned-7.2.12+deb14-cloud-amd64_7.2.12-1_amd64.deb": "",
	}
	for name, content := range files {
		p := filepath.Join(c.Dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.prune(); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		_, err := os.Stat(filepath.Join(c.Dir, name))
		gone := os.IsNotExist(err)
		old := strings.Contains(name, "6.1.0-47") || strings.Contains(name, "7.2.12")
		if gone != old {
			t.Errorf("%s: removed=%v, want %v", name, gone, old)
		}
	}
}
