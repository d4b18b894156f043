// SPDX-License-Identifier: Apache-2.0

// Package selector is the one vocabulary every command uses to name
// processes, cgroups, interfaces and network namespaces (-p/--pid,
// -c/--cgroup, -i/--interface, -n/--netns): the same text is accepted, and
// means the same thing, for `latency`, `stream`, `top` and `serve`. Each
// command then applies the parsed selection in its own way (latency by ids
// in the kernel, connection filters by paths and addresses in user space).
package selector

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/clierr"
)

// PIDMax is the kernel's PID_MAX_LIMIT: no pid is larger.
const PIDMax = 4 * 1024 * 1024

// Specs are the selector flags as the user typed them.
type Specs struct {
	PIDs       []string
	Cgroups    []string
	Interfaces []string
	Netns      string
	fs         *pflag.FlagSet // to tell an explicitly empty list from none
}

// Help describes, per command, what each selector restricts.
type Help struct {
	PID, Cgroup, Interface, Netns string
}

// Register adds -p/--pid, -c/--cgroup, -i/--interface and -n/--netns to fs
// (netstacklat's letters), with the command's help and the namespace it
// selects by default ("0" our own, "-1" all).
func (s *Specs) Register(fs *pflag.FlagSet, help Help, netnsDefault string) {
	s.fs = fs
	fs.StringSliceVarP(&s.PIDs, "pid", "p", nil, help.PID+" (process ids, comma-separated or repeated)")
	fs.StringSliceVarP(&s.Cgroups, "cgroup", "c", nil, help.Cgroup+" (cgroup v2 paths or ids)")
	fs.StringSliceVarP(&s.Interfaces, "interface", "i", nil, help.Interface+" (names or indexes in our namespace)")
	fs.StringVarP(&s.Netns, "netns", "n", netnsDefault, help.Netns+
		": 0 our own, -1 all, an inode, a name under /run/netns or a path such as /proc/PID/ns/net")
}

// Selection is a parsed, validated Specs. An empty list selects everything.
type Selection struct {
	PIDs       []uint32
	Cgroups    []Cgroup
	Interfaces []Interface
	Netns      Netns
	// NetnsDefault: -n was registered but not given, Netns is the
	// command's default.
	// Connections are then selected in every namespace (connfilter), even
	// where the command's default (serve's latency probes) is our own.
	NetnsDefault bool
}

// Parse validates every selector; errors name the flag and the value (exit 2).
func (s *Specs) Parse() (Selection, error) {
	var sel Selection
	for flag, list := range map[string][]string{"pid": s.PIDs, "cgroup": s.Cgroups, "interface": s.Interfaces} {
		if len(list) == 0 && s.fs != nil && s.fs.Changed(flag) {
			return sel, clierr.Usage(flag, "", "names nothing (leave the flag out to select everything)")
		}
	}
	for _, v := range s.PIDs {
		pid, err := ParsePID(v)
		if err != nil {
			return sel, clierr.Usage("pid", v, "%v", err)
		}
		sel.PIDs = append(sel.PIDs, pid)
	}
	for _, v := range s.Cgroups {
		cg, err := ParseCgroup(v)
		if err != nil {
			return sel, clierr.Usage("cgroup", v, "%v", err)
		}
		sel.Cgroups = append(sel.Cgroups, cg)
	}
	for _, v := range s.Interfaces {
		ifc, err := ParseInterface(v)
		if err != nil {
			return sel, clierr.Usage("interface", v, "%v", err)
		}
		sel.Interfaces = append(sel.Interfaces, ifc)
	}
	// Specs filled in by code rather than flags say what they mean.
	sel.NetnsDefault = s.fs != nil && !s.netnsChanged()
	if s.Netns == "" && !s.netnsChanged() {
		sel.Netns = Netns{All: true} // Specs{} selects everything
		return sel, nil
	}
	var err error
	if sel.Netns, err = ParseNetns(s.Netns); err != nil {
		return sel, clierr.Usage("netns", s.Netns, "%v", err)
	}
	return sel, nil
}

// Gone reports the first selected interface or cgroup that no longer is
// what it was at start (deleted, or re-created under the same name with
// another index or id), or a selected network namespace that is no longer
// alive (no process in it, no name under /run/netns for it). Commands that
// select by index, id or inode in the kernel would silently stop counting;
// latency calls this at every report and serve at every --interval, and
// both stop.
func (s Selection) Gone() error {
	for _, i := range s.Interfaces {
		if now, err := net.InterfaceByName(i.Name); err != nil || now.Index != i.Index {
			return fmt.Errorf("interface %s (index %d) was deleted or re-created since start; restart to select it again", i.Name, i.Index)
		}
	}
	for _, c := range s.Cgroups {
		if id, err := cgroup.ID(c.Path); err != nil || id != c.ID {
			return fmt.Errorf("cgroup %s (id %d) was deleted or re-created since start; restart to select it again", c.Path, c.ID)
		}
	}
	if n := s.Netns; !n.All && !n.Own {
		if _, ok := Namespaces()[n.Inode]; !ok {
			return fmt.Errorf("network namespace %d is gone since start (no process is in it and no name under /run/netns holds it); restart to select another", n.Inode)
		}
	}
	return nil
}

// netnsChanged reports whether -n was given (rather than defaulted).
func (s *Specs) netnsChanged() bool { return s.fs != nil && s.fs.Changed("netns") }

// ParsePID accepts a process id from 1 to PIDMax.
func ParsePID(v string) (uint32, error) {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n < 1 || n > PIDMax {
		return 0, fmt.Errorf("must be a process id from 1 to %d", PIDMax)
	}
	return uint32(n), nil
}

// Cgroup is a cgroup v2 directory: its id (what BPF reports) and its path
// relative to the v2 root (what records carry), e.g. "/system.slice".
type Cgroup struct {
	ID   uint64
	Path string
}

// ParseCgroup accepts a v2 path, absolute in the file system or relative to
// the v2 root, or the id of an existing cgroup.
func ParseCgroup(v string) (Cgroup, error) {
	root, err := cgroup.Root()
	if err != nil {
		return Cgroup{}, err
	}
	if id, err := strconv.ParseUint(v, 10, 64); err == nil {
		r, err := cgroup.NewResolver()
		if err != nil {
			return Cgroup{}, err
		}
		p, ok := r.Lookup(id)
		if !ok {
			return Cgroup{}, fmt.Errorf("no cgroup with this id")
		}
		return Cgroup{ID: id, Path: p}, nil
	}
	full := filepath.Clean(v)
	if !strings.HasPrefix(full+"/", root+"/") {
		full = filepath.Join(root, v) // relative to the v2 root
	}
	rel, err := filepath.Rel(root, full)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return Cgroup{}, fmt.Errorf("not under the cgroup v2 root %s", root)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(full, &fs); err != nil {
		return Cgroup{}, fmt.Errorf("no such cgroup v2 directory (%v)", err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return Cgroup{}, fmt.Errorf("not a cgroup v2 directory")
	}
	id, err := cgroup.ID(full)
	if err != nil {
		return Cgroup{}, fmt.Errorf("no such cgroup v2 directory (%v)", err)
	}
	return Cgroup{ID: id, Path: filepath.Clean("/" + rel)}, nil
}

// Interface is a network interface of our namespace.
type Interface struct {
	Index int
	Name  string
}

// ParseInterface accepts the name or the index of an interface in our
// network namespace.
func ParseInterface(v string) (Interface, error) {
	if ifc, err := net.InterfaceByName(v); err == nil {
		return Interface{Index: ifc.Index, Name: ifc.Name}, nil
	}
	n, err := strconv.ParseUint(v, 10, 31)
	if err != nil || n == 0 {
		return Interface{}, fmt.Errorf("no such interface in our network namespace")
	}
	ifc, err := net.InterfaceByIndex(int(n))
	if err != nil {
		return Interface{}, fmt.Errorf("no interface with this index in our network namespace")
	}
	return Interface{Index: ifc.Index, Name: ifc.Name}, nil
}

// Netns selects network namespaces: all of them, or the one with Inode
// (Own when that is ours).
type Netns struct {
	All   bool
	Own   bool
	Inode uint64
}

// ParseNetns accepts 0 (our own namespace), -1 (all), the inode of a live
// network namespace, a name under /run/netns, or a path that opens a network
// namespace (/proc/PID/ns/net). Anything else, a file that is not a
// namespace or a namespace of another type included, is refused.
func ParseNetns(v string) (Netns, error) {
	own, err := inodeOf("/proc/self/ns/net")
	if err != nil {
		return Netns{}, fmt.Errorf("our own network namespace: %v", err)
	}
	switch n, err := strconv.ParseInt(v, 10, 64); {
	case err == nil && n == 0:
		return Netns{Own: true, Inode: own}, nil
	case err == nil && n == -1:
		return Netns{All: true}, nil
	case err == nil && n > 0 && n <= 1<<32-1:
		if _, ok := Namespaces()[uint64(n)]; !ok {
			return Netns{}, fmt.Errorf("no network namespace with this inode is alive (held by a process or under /run/netns)")
		}
		return Netns{Own: uint64(n) == own, Inode: uint64(n)}, nil
	case err == nil || v == "" || strings.HasPrefix(v, "-"):
		return Netns{}, fmt.Errorf("must be 0 (our own), -1 (all), a namespace inode, a name under /run/netns or a path")
	}
	path := v
	if !strings.ContainsRune(v, '/') {
		path = filepath.Join("/run/netns", v)
	}
	ino, err := netnsInode(path)
	if err != nil {
		return Netns{}, err
	}
	return Netns{Own: ino == own, Inode: ino}, nil
}

// netnsInode returns the inode of the network namespace path opens, refusing
// files that are not namespaces (a stale name under /run/netns whose mount
// is gone is a plain file) and namespaces of other types.
func netnsInode(path string) (uint64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, fmt.Errorf("no such network namespace (%v)", err)
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil || fs.Type != unix.NSFS_MAGIC {
		return 0, fmt.Errorf("not a namespace")
	}
	typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		return 0, fmt.Errorf("cannot tell the namespace's type: %v", err)
	}
	if typ != unix.CLONE_NEWNET {
		return 0, fmt.Errorf("a namespace, but not a network namespace")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

func inodeOf(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// Namespaces maps the inode of every network namespace that a process or a
// bind mount under /run/netns keeps alive to a path that opens it.
func Namespaces() map[uint64]string {
	found := map[uint64]string{}
	paths, _ := filepath.Glob("/run/netns/*")
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range append(paths, procs...) {
		var st unix.Stat_t
		var fs unix.Statfs_t
		// a name under /run/netns whose mount is gone is a plain file
		if unix.Statfs(p, &fs) == nil && fs.Type == unix.NSFS_MAGIC && unix.Stat(p, &st) == nil {
			if _, ok := found[st.Ino]; !ok {
				found[st.Ino] = p
			}
		}
	}
	return found
}
