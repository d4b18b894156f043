// SPDX-License-Identifier: Apache-2.0

// Package bpffd lists the BPF objects (programs, maps, links) a process
// holds file descriptors on, and the ids the kernel gives them, from
// /proc/<pid>/fd and /proc/<pid>/fdinfo. It needs neither bpftool nor BPF
// iterators, which some kernels refuse, and it sees exactly one process's
// objects, whatever else is loaded on the host. The exporter reports its own
// programs with it, the benchmark measures the tools it runs, and tests check
// that a run leaves nothing behind.
package bpffd

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Kind is the kind of BPF object a descriptor refers to, as the kernel
// names its anonymous inode.
type Kind string

// The kinds of BPF objects the callers look for.
const (
	Prog Kind = "bpf-prog"
	Map  Kind = "bpf-map"
	Link Kind = "bpf_link" // the kernel spells it with an underscore
)

// Object is one descriptor on a BPF object and the ids its fdinfo names:
// a program has ProgID, a map MapID, a link LinkID and the ProgID of the
// program it attaches.
type Object struct {
	FD     int
	Kind   Kind
	ProgID uint32
	MapID  uint32
	LinkID uint32
}

// Held lists the BPF objects process pid holds descriptors on. A
// descriptor closed while the list is made is left out.
func Held(pid int) ([]Object, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing BPF objects of process %d: %w", pid, err)
	}
	var out []Object
	for _, e := range fds {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(target, "anon_inode:bpf") {
			continue // closed meanwhile, or not a BPF object
		}
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
		if err != nil {
			continue
		}
		o := parse(f)
		f.Close()
		o.FD, o.Kind = fd, Kind(strings.TrimPrefix(target, "anon_inode:"))
		out = append(out, o)
	}
	return out, nil
}

// parse reads the prog_id, map_id and link_id lines of an fdinfo file; an
// id that is absent stays 0.
func parse(r io.Reader) Object {
	var o Object
	s := bufio.NewScanner(r)
	for s.Scan() {
		key, val, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 32)
		if err != nil {
			continue
		}
		switch key {
		case "prog_id":
			o.ProgID = uint32(n)
		case "map_id":
			o.MapID = uint32(n)
		case "link_id":
			o.LinkID = uint32(n)
		}
	}
	return o
}
