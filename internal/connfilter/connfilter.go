// SPDX-License-Identifier: Apache-2.0

// Package connfilter holds the connection filters every connection consumer
// shares (stream, TUI, Prometheus exporter): their flags, their validation
// and the predicate that selects records. Processes, cgroups, interfaces
// and namespaces are named in the selector vocabulary every command shares.
package connfilter

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/selector"
)

// Options are the filter flags as the user gave them.
type Options struct {
	Selectors selector.Specs // -p, -c, -i, -n
	Process   string
	Ports     []string
	TCP, UDP  bool
	// IPv4, IPv6 select an address family (-4, -6, as bcc's tcptop).
	IPv4, IPv6 bool
}

// Help says what the selector flags select for connections.
var Help = selector.Help{
	PID:       "only connections owned by these processes",
	Cgroup:    "only connections owned by processes in these cgroups or below them",
	Interface: "only connections whose local address belongs to one of these interfaces",
	Netns:     "only connections in this network namespace",
}

// Register adds every filter flag to fs; connections of every namespace are
// selected by default.
func (o *Options) Register(fs *pflag.FlagSet) {
	o.Selectors.Register(fs, Help, "-1")
	o.RegisterMatchers(fs)
}

// RegisterMatchers adds the flags that are not selectors (--process, --port,
// --tcp, --udp), for commands whose selector flags serve other uses too.
func (o *Options) RegisterMatchers(fs *pflag.FlagSet) {
	fs.StringVar(&o.Process, "process", "", "only connections whose process name matches this name or regular expression")
	fs.StringSliceVar(&o.Ports, "port", nil, "only connections with one of these local or remote ports (comma-separated or repeated)")
	fs.BoolVar(&o.TCP, "tcp", false, "only TCP connections")
	fs.BoolVar(&o.UDP, "udp", false, "only UDP flows")
	fs.BoolVarP(&o.IPv4, "ipv4", "4", false, "only IPv4 connections (a dual-stack socket's IPv4-mapped addresses included)")
	fs.BoolVarP(&o.IPv6, "ipv6", "6", false, "only IPv6 connections (not IPv4-mapped)")
}

// Filter selects records. The zero value (and nil) selects everything.
// Within a list one value must match; every filter given must match.
type Filter struct {
	pids     []uint32
	process  *regexp.Regexp
	ports    []uint16
	tcp, udp bool
	only4    bool // -4
	only6    bool // -6
	cgroups  []string
	netns    uint32
	netnsSet bool
	ifaces   []ifaceAddrs
}

type ifaceAddrs struct {
	addrs    []netip.Addr
	loopback bool // a loopback device also owns all of 127.0.0.0/8 and ::1
}

// Compile validates the options; errors name the flag and value (exit 2).
func (o *Options) Compile() (*Filter, error) {
	sel, err := o.Selectors.Parse()
	if err != nil {
		return nil, err
	}
	return o.CompileWith(sel)
}

// CompileWith validates the matcher options and combines them with a
// selection parsed elsewhere (serve shares -p/-c/-i/-n with its latency
// probes). A namespace selection left at its default selects connections in
// every namespace: they are host-wide unless -n is given.
func (o *Options) CompileWith(sel selector.Selection) (*Filter, error) {
	if o.IPv4 && o.IPv6 {
		return nil, clierr.Usage("ipv6", "true", "cannot be combined with -4/--ipv4 (leave both out for both families)")
	}
	f := &Filter{tcp: o.TCP || !o.UDP, udp: o.UDP || !o.TCP, only4: o.IPv4, only6: o.IPv6, pids: sel.PIDs}
	if o.Process != "" {
		re, err := regexp.Compile(o.Process)
		if err != nil {
			return nil, clierr.Usage("process", o.Process, "not a valid regular expression: %v", err)
		}
		f.process = re
	}
	for _, p := range o.Ports {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, clierr.Usage("port", p, "must be between 1 and 65535")
		}
		f.ports = append(f.ports, uint16(n))
	}
	for _, c := range sel.Cgroups {
		f.cgroups = append(f.cgroups, c.Path)
	}
	if !sel.Netns.All && !sel.NetnsDefault {
		f.netns, f.netnsSet = uint32(sel.Netns.Inode), true
	}
	for _, ifc := range sel.Interfaces {
		a, err := interfaceAddrs(ifc)
		if err != nil {
			return nil, clierr.Usage("interface", ifc.Name, "%v", err)
		}
		f.ifaces = append(f.ifaces, a)
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

// Match reports whether r passes every filter.
func (f *Filter) Match(r *conn.Record) bool {
	switch {
	case f == nil:
		return true
	case r.Proto == "tcp" && !f.tcp, r.Proto == "udp" && !f.udp:
		return false
	case f.only4 && !r.LocalAddr.Unmap().Is4(), f.only6 && r.LocalAddr.Unmap().Is4():
		return false
	case len(f.pids) > 0 && !slices.Contains(f.pids, r.PID):
		return false
	case f.process != nil && !f.process.MatchString(r.Comm):
		return false
	case len(f.ports) > 0 && !slices.Contains(f.ports, r.LocalPort) && !slices.Contains(f.ports, r.RemotePort):
		return false
	case len(f.cgroups) > 0 && !slices.ContainsFunc(f.cgroups, func(c string) bool { return underCgroup(r.Cgroup, c) }):
		return false
	case f.netnsSet && r.Netns != f.netns:
		return false
	case len(f.ifaces) > 0 && !slices.ContainsFunc(f.ifaces, func(i ifaceAddrs) bool { return i.owns(r.LocalAddr) }):
		return false
	}
	return true
}

func underCgroup(path, parent string) bool {
	return parent == "/" || path == parent || strings.HasPrefix(path, parent+"/")
}

func (i ifaceAddrs) owns(a netip.Addr) bool {
	a = a.Unmap()
	return i.loopback && a.IsLoopback() || slices.Contains(i.addrs, a)
}

// interfaceAddrs returns the addresses of an interface.
func interfaceAddrs(ifc selector.Interface) (ifaceAddrs, error) {
	ni, err := net.InterfaceByIndex(ifc.Index)
	if err != nil {
		return ifaceAddrs{}, fmt.Errorf("no such interface in this network namespace")
	}
	addrs, err := ni.Addrs()
	if err != nil {
		return ifaceAddrs{}, fmt.Errorf("reading its addresses: %v", err)
	}
	out := ifaceAddrs{loopback: ni.Flags&net.FlagLoopback != 0}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out.addrs = append(out.addrs, p.Addr().Unmap())
		}
	}
	return out, nil
}
