// SPDX-License-Identifier: Apache-2.0

// Package initramfs writes the gzip-compressed cpio archive ("newc" format)
// that the kernel unpacks into its root file system at boot.
package initramfs

import (
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Writer adds directories, files and device nodes to an initramfs. Parent
// directories are created on demand.
type Writer struct {
	gz   *gzip.Writer
	ino  int
	dirs map[string]bool
	err  error
}

// NewWriter starts an initramfs written to w.
func NewWriter(w io.Writer) *Writer {
	gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	return &Writer{gz: gz, dirs: map[string]bool{"": true, ".": true}}
}

// Mode bits of cpio entries (those of stat(2)).
const (
	typeDir  = 0o040000
	typeFile = 0o100000
	typeChar = 0o020000
	typeLink = 0o120000
)

// Dir adds directory name and its parents.
func (w *Writer) Dir(name string) {
	name = clean(name)
	if w.dirs[name] {
		return
	}
	w.Dir(path.Dir(name))
	w.dirs[name] = true
	w.entry(name, typeDir|0o755, 0, 0, nil)
}

// File adds a regular file with the given permission bits and content.
func (w *Writer) File(name string, perm uint32, data []byte) {
	name = clean(name)
	w.Dir(path.Dir(name))
	w.entry(name, typeFile|perm, 0, 0, data)
}

// CopyFile adds the host file src as name, keeping its permission bits.
func (w *Writer) CopyFile(name, src string) {
	if w.err != nil {
		return
	}
	data, err := os.ReadFile(src)
	if err != nil {
		w.err = err
		return
	}
	st, err := os.Stat(src)
	if err != nil {
		w.err = err
		return
	}
	w.File(name, uint32(st.Mode().Perm()), data)
}

// CopyTree adds the host directory src, with its files and subdirectories,
// as name.
func (w *Writer) CopyTree(name, src string) error {
	return w.CopyTreeFunc(name, src, nil)
}

// CopyTreeFunc is CopyTree with only the entries keep accepts (given their
// path relative to src); a directory it rejects is skipped whole. A nil keep
// accepts everything.
func (w *Writer) CopyTreeFunc(name, src string, keep func(rel string, d fs.DirEntry) bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if keep != nil && rel != "." && !keep(rel, d) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		dst := path.Join(name, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			w.Dir(dst)
		case d.Type().IsRegular():
			w.CopyFile(dst, p)
		}
		return w.err
	})
}

// Symlink adds name pointing at target, like busybox's applet links.
func (w *Writer) Symlink(name, target string) {
	name = clean(name)
	w.Dir(path.Dir(name))
	w.entry(name, typeLink|0o777, 0, 0, []byte(target))
}

// CharDevice adds a character device node, such as /dev/console, that must
// exist before devtmpfs is mounted.
func (w *Writer) CharDevice(name string, major, minor uint32) {
	name = clean(name)
	w.Dir(path.Dir(name))
	w.entry(name, typeChar|0o600, major, minor, nil)
}

// Close writes the trailer and flushes; it returns the first error of any
// earlier call.
func (w *Writer) Close() error {
	w.entry("TRAILER!!!", 0, 0, 0, nil)
	if err := w.gz.Close(); w.err == nil {
		w.err = err
	}
	return w.err
}

func clean(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

func (w *Writer) entry(name string, mode, rdevMajor, rdevMinor uint32, data []byte) {
	if w.err != nil {
		return
	}
	w.ino++
	nlink := 1
	if mode&typeDir != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		w.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	w.write([]byte(hdr + name + "\x00"))
	w.pad(len(hdr) + len(name) + 1)
	w.write(data)
	w.pad(len(data))
}

func (w *Writer) write(b []byte) {
	if w.err == nil {
		_, w.err = w.gz.Write(b)
	}
}

// pad aligns the stream to 4 bytes after n bytes, as newc requires.
func (w *Writer) pad(n int) {
	if r := n % 4; r != 0 {
		w.write(make([]byte, 4-r))
	}
}
