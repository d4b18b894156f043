// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

const modulePath = "github.com/stacktop/stacktop"

// testenvPkg marks integration suites: a package whose tests use testenv
// (root checks, network peers) is one, and so is testenv itself; the
// matrix's own packages (runnerPkgs) are host tools tested on the host.
const (
	testenvPkg = modulePath + "/internal/testenv"
	runnerPkgs = modulePath + "/test/kernels"
)

// artifacts are the static binaries every guest gets.
type artifacts struct {
	init     string // guestinit
	stacktop string
	docs     string // the repository's docs directory, which tests check code against
	suites   []builtSuite
}

type builtSuite struct {
	name string // package path inside the module, e.g. internal/testenv
	path string // on the host
	dir  string // the package's directory on the host
}

// goCmd runs the go tool in the module root with cgo off, so every binary is
// static and runs on a busybox initramfs.
func goCmd(ctx context.Context, root string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	if out, err := cmd.Output(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// integrationSuites lists, from `go list` output lines of the form
// "importpath|testimports|xtestimports", the packages whose tests use testenv.
func integrationSuites(goList string) []string {
	var pkgs []string
	for _, line := range strings.Split(strings.TrimSpace(goList), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 {
			continue
		}
		imports := strings.Split(f[1]+","+f[2], ",")
		if f[0] == runnerPkgs || strings.HasPrefix(f[0], runnerPkgs+"/") {
			continue
		}
		if f[0] == testenvPkg || slices.Contains(imports, testenvPkg) {
			pkgs = append(pkgs, f[0])
		}
	}
	return pkgs
}

func build(ctx context.Context, root, dir string, only []string) (*artifacts, error) {
	a := &artifacts{init: filepath.Join(dir, "init"), stacktop: filepath.Join(dir, "stacktop"), docs: filepath.Join(root, "docs")}
	if err := goCmd(ctx, root, "build", "-trimpath", "-o", a.init, "./test/kernels/guestinit"); err != nil {
		return nil, err
	}
	if err := goCmd(ctx, root, "build", "-trimpath", "-o", a.stacktop, "./cmd/stacktop"); err != nil {
		return nil, err
	}
	pkgs := only
	if len(pkgs) == 0 {
		cmd := exec.CommandContext(ctx, "go", "list", "-f", "{{.ImportPath}}|{{join .TestImports \",\"}}|{{join .XTestImports \",\"}}", "./...")
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		pkgs = integrationSuites(string(out))
	}
	for _, pkg := range pkgs {
		name := strings.TrimPrefix(pkg, modulePath+"/")
		bin := filepath.Join(dir, "suites", strings.ReplaceAll(name, "/", "_")+".test")
		if err := goCmd(ctx, root, "test", "-c", "-trimpath", "-o", bin, pkg); err != nil {
			return nil, err
		}
		if _, err := os.Stat(bin); err != nil {
			continue // a package with no test files yields no binary
		}
		a.suites = append(a.suites, builtSuite{name: name, path: bin, dir: filepath.Join(root, name)})
	}
	return a, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// dataFile says whether a suite's guest copy of its package directory gets
// the entry at rel (relative to the package directory dir): every file a
// test may open by a relative path as under go test (testdata, and data
// such as deploy's manifests), but no Go source and no nested Go package,
// which is a package of its own.
func dataFile(dir string) func(rel string, d fs.DirEntry) bool {
	return func(rel string, d fs.DirEntry) bool {
		if slices.Contains(strings.Split(filepath.ToSlash(rel), "/"), "testdata") {
			return true // copied whole, Go files too: they are data there
		}
		if !d.IsDir() {
			return !strings.HasSuffix(rel, ".go")
		}
		gos, _ := filepath.Glob(filepath.Join(dir, rel, "*.go"))
		return len(gos) == 0
	}
}
