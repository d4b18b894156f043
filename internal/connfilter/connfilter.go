// Package connfilter holds the connection filters every connection consumer
// shares (stream, TUI, Prometheus exporter): their flags, their validation
// and the predicate that selects records.
package connfilter

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/conn"
)

// Options are the filter flags as the user gave them.
type Options struct {
	PID       int
	Process   string
	Port      int
	TCP, UDP  bool
	Cgroup    string
	Netns     string
	Interface string
	fs        *pflag.FlagSet // to tell an explicit 0 from the default
}

// Register adds the filter flags to fs.
func (o *Options) Register(fs *pflag.FlagSet) {
	o.fs = fs
	fs.IntVar(&o.PID, "pid", 0, "only connections owned by this process id")
	fs.StringVar(&o.Process, "process", "", "only connections whose process name matches this name or regular expression")
	fs.IntVar(&o.Port, "port", 0, "only connections with this local or remote port")
	fs.BoolVar(&o.TCP, "tcp", false, "only TCP connections")
	fs.BoolVar(&o.UDP, "udp", false, "only UDP flows")
	fs.StringVar(&o.Cgroup, "cgroup", "", "only connections owned by processes in this cgroup v2 path or below it")
	fs.StringVar(&o.Netns, "netns", "", "only connections in this network namespace: inode number, name under /run/netns, or path")
	fs.StringVar(&o.Interface, "interface", "", "only connections whose local address belongs to this interface (in stacktop's namespace)")
}

// Filter selects records. The zero value (and nil) selects everything.
type Filter struct {
	pid           uint32
	process       *regexp.Regexp
	port          uint16
	tcp, udp      bool
	cgroup        string
	netns         uint32
	ifaceAddrs    []netip.Addr
	ifaceLoopback bool
	ifaceSet      bool
}

// Compile validates the options; errors name the flag and value (exit 2).
func (o *Options) Compile() (*Filter, error) {
	f := &Filter{tcp: o.TCP || !o.UDP, udp: o.UDP || !o.TCP}
	if o.PID < 0 || o.PID == 0 && o.changed("pid") {
		return nil, clierr.Usage("pid", strconv.Itoa(o.PID), "must be a positive process id")
	}
	f.pid = uint32(o.PID)
	if o.Process != "" {
		re, err := regexp.Compile(o.Process)
		if err != nil {
			return nil, clierr.Usage("process", o.Process, "not a valid regular expression: %v", err)
		}
		f.process = re
	}
	if o.Port < 0 || o.Port > 65535 || o.Port == 0 && o.changed("port") {
		return nil, clierr.Usage("port", strconv.Itoa(o.Port), "must be between 1 and 65535")
	}
	f.port = uint16(o.Port)
	if o.Cgroup != "" {
		rel, err := cgroupPath(o.Cgroup)
		if err != nil {
			return nil, clierr.Usage("cgroup", o.Cgroup, "%v", err)
		}
		f.cgroup = rel
	}
	if o.Netns != "" {
		ino, err := netnsInode(o.Netns)
		if err != nil {
			return nil, clierr.Usage("netns", o.Netns, "%v", err)
		}
		f.netns = ino
	}
	if o.Interface != "" {
		addrs, loopback, err := interfaceAddrs(o.Interface)
		if err != nil {
			return nil, clierr.Usage("interface", o.Interface, "%v", err)
		}
		f.ifaceAddrs, f.ifaceLoopback, f.ifaceSet = addrs, loopback, true
	}
	return f, nil
}

// Protocols reports which protocols the filter can select (both for nil),
// so that the tracker attaches nothing for the other.
func (f *Filter) Protocols() (tcp, udp bool) {
	if f == nil {
		return true, true
	}
	return f.tcp, f.udp
}

func (o *Options) changed(flag string) bool { return o.fs != nil && o.fs.Changed(flag) }

// Match reports whether r passes every filter.
func (f *Filter) Match(r *conn.Record) bool {
	switch {
	case f == nil:
		return true
	case r.Proto == "tcp" && !f.tcp, r.Proto == "udp" && !f.udp:
		return false
	case f.pid != 0 && r.PID != f.pid:
		return false
	case f.process != nil && !f.process.MatchString(r.Comm):
		return false
	case f.port != 0 && r.LocalPort != f.port && r.RemotePort != f.port:
		return false
	case f.cgroup != "" && !underCgroup(r.Cgroup, f.cgroup):
		return false
	case f.netns != 0 && r.Netns != f.netns:
		return false
	case f.ifaceSet && !f.onInterface(r.LocalAddr):
		return false
	}
	return true
}

func underCgroup(path, parent string) bool {
	return parent == "/" || path == parent || strings.HasPrefix(path, parent+"/")
}

func (f *Filter) onInterface(a netip.Addr) bool {
	a = a.Unmap()
	if f.ifaceLoopback && a.IsLoopback() {
		return true
	}
	return slices.Contains(f.ifaceAddrs, a)
}

// cgroupPath checks that the cgroup exists and returns its path relative to
// the v2 root, the form records carry.
func cgroupPath(p string) (string, error) {
	if _, err := cgroup.ID(p); err != nil {
		return "", fmt.Errorf("no such cgroup v2 directory (%v)", err)
	}
	root, err := cgroup.Root()
	if err != nil {
		return "", err
	}
	rel := filepath.Clean("/" + strings.TrimPrefix(p, root))
	return rel, nil
}

// netnsInode accepts an inode number, a name under /run/netns or a path such
// as /proc/PID/ns/net.
func netnsInode(v string) (uint32, error) {
	if n, err := strconv.ParseUint(v, 10, 32); err == nil && n > 0 {
		return uint32(n), nil
	}
	path := v
	if !strings.ContainsRune(v, '/') {
		path = filepath.Join("/run/netns", v)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("no such network namespace (%v)", err)
	}
	return uint32(st.Ino), nil
}

// interfaceAddrs returns the addresses of an interface and whether it is a
// loopback device, which also owns all of 127.0.0.0/8.
func interfaceAddrs(name string) ([]netip.Addr, bool, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, false, fmt.Errorf("no such interface in this network namespace")
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, false, fmt.Errorf("reading its addresses: %v", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, ifi.Flags&net.FlagLoopback != 0, nil
}
