// SPDX-License-Identifier: Apache-2.0

// Package cgroup translates between cgroup v2 ids (what BPF reports, the
// inode number of the cgroup directory) and their paths.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/termsafe"
)

// Root returns the mount point of the cgroup v2 hierarchy, which may be
// /sys/fs/cgroup (unified) or /sys/fs/cgroup/unified (hybrid).
func Root() (string, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 3 && fields[2] == "cgroup2" {
			return fields[1], nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy is mounted")
}

// ID returns the cgroup id of a path, which may be absolute in the file
// system or relative to the v2 root ("/system.slice/x.service").
func ID(path string) (uint64, error) {
	root, err := Root()
	if err != nil {
		return 0, err
	}
	full := path
	if !strings.HasPrefix(path, root) {
		full = filepath.Join(root, path)
	}
	var st unix.Stat_t
	if err := unix.Stat(full, &st); err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, fmt.Errorf("cgroup %s: not a directory", path)
	}
	return st.Ino, nil
}

// Resolver maps cgroup ids to paths relative to the v2 root, caching what it
// has seen and rescanning the hierarchy when an id is unknown.
type Resolver struct {
	mu    sync.Mutex
	root  string
	paths map[uint64]string
}

// NewResolver returns a Resolver for the mounted v2 hierarchy.
func NewResolver() (*Resolver, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	return &Resolver{root: root, paths: map[uint64]string{}}, nil
}

// Path returns the path of id relative to the v2 root, e.g. "/" or
// "/system.slice/nginx.service"; an id that no longer exists is shown as a
// number.
func (r *Resolver) Path(id uint64) string {
	if p, ok := r.Lookup(id); ok {
		return p
	}
	return fmt.Sprintf("cgroup:%d", id)
}

// Lookup returns the path of id relative to the v2 root, and false if no
// cgroup has that id (any more).
func (r *Resolver) Lookup(id uint64) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.paths[id]; ok {
		return p, p != ""
	}
	r.rescan()
	p, ok := r.paths[id]
	if !ok {
		r.paths[id] = "" // do not rescan for every lookup of a vanished cgroup
	}
	return p, ok
}

// Root returns the mount point of the v2 hierarchy the paths are relative to.
func (r *Resolver) Root() string { return r.root }

func (r *Resolver) rescan() {
	_ = filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			rel := strings.TrimPrefix(p, r.root)
			if rel == "" {
				rel = "/"
			}
			r.paths[st.Ino] = termsafe.ValidUTF8(rel) // a delegated cgroup may be named anything
		}
		return nil
	})
}
