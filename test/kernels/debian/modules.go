// SPDX-License-Identifier: Apache-2.0

package debian

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Module is a loadable module, uncompressed, ready for finit_module(2).
type Module struct {
	Name string
	Path string // on the host
}

// Modules returns the named modules and everything they depend on, in load
// order, decompressed into the image's cache. Modules built into the kernel
// are left out; a name that is neither built in nor shipped is an error.
func (img *Image) Modules(names []string) ([]Module, error) {
	index := map[string]string{}
	err := filepath.WalkDir(img.ModulesDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if name, ok := ModuleName(d.Name()); ok {
				index[name] = p
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(img.ModulesDir, "modules.builtin")); err == nil {
		for _, line := range strings.Fields(string(b)) {
			if name, ok := ModuleName(filepath.Base(line)); ok {
				builtin[name] = true
			}
		}
	}
	r := &resolver{index: index, builtin: builtin, done: map[string]bool{},
		outDir: filepath.Join(filepath.Dir(img.ModulesDir), ".uncompressed-"+img.Release)}
	for _, n := range names {
		if err := r.add(strings.ReplaceAll(n, "-", "_")); err != nil {
			return nil, fmt.Errorf("kernel %s: %w", img.Release, err)
		}
	}
	return r.order, nil
}

// ModuleName turns a module file name (veth.ko, nf-foo.ko.xz) into the name
// the kernel uses (veth, nf_foo).
func ModuleName(file string) (string, bool) {
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		if base, ok := strings.CutSuffix(file, ext); ok {
			return strings.ReplaceAll(base, "-", "_"), true
		}
	}
	return "", false
}

type resolver struct {
	index   map[string]string
	builtin map[string]bool
	done    map[string]bool
	outDir  string
	order   []Module
}

func (r *resolver) add(name string) error {
	if r.done[name] || r.builtin[name] {
		return nil
	}
	r.done[name] = true
	src, ok := r.index[name]
	if !ok {
		return fmt.Errorf("module %s is neither built in nor shipped", name)
	}
	ko, err := uncompressed(src, filepath.Join(r.outDir, name+".ko"))
	if err != nil {
		return err
	}
	deps, err := Depends(ko)
	if err != nil {
		return err
	}
	for _, d := range deps {
		if err := r.add(d); err != nil {
			return fmt.Errorf("%s needs %w", name, err)
		}
	}
	r.order = append(r.order, Module{Name: name, Path: ko})
	return nil
}

// decompressors run the tool that undoes each compression Debian used.
var decompressors = map[string][]string{".xz": {"xz", "-dc"}, ".zst": {"zstd", "-dc"}, ".gz": {"gzip", "-dc"}}

func uncompressed(src, dst string) (string, error) {
	tool, ok := decompressors[filepath.Ext(src)]
	if !ok {
		return src, nil
	}
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	out, err := exec.Command(tool[0], append(tool[1:], src)...).Output()
	if err != nil {
		return "", fmt.Errorf("decompressing %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	return dst, os.WriteFile(dst, out, 0o644)
}

// Depends reads the "depends=" entry of a module's .modinfo section.
func Depends(ko string) ([]string, error) {
	f, err := elf.Open(ko)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", ko, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("module %s has no .modinfo", ko)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}
