// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/selector"
	"github.com/stacktop/stacktop/internal/termsafe"
)

// preexisting is a TCP socket that was open before the tracker attached, as
// sock_diag listed it at start-up. It gives the socket's kernel entry
// (adopted by conns_adopt) its owner from /proc, and stands in for the
// entry where there is none (the table was full): then its segments, RTT
// and retransmits are tcp_info's as of start-up, and its bytes 0.
type preexisting struct {
	rec    conn.Record // Event, TS and rates are set per snapshot
	cookie uint64
	// inKernel is the last refresh (scratch.refresh) in which the kernel's
	// table had an entry for the socket, which then reports it instead.
	inKernel uint64
}

// listPreexisting enumerates the TCP sockets of every network namespace it
// can find (those of processes, and those named under /run/netns), with
// their owners, and the owners of the UDP sockets (udp, by cookie).
// sock_diag answers for one namespace at a time.
func listPreexisting() (tcp map[uint64]*preexisting, udp map[uint64]connsOwner) {
	owners := socketOwners()
	tcp, udp = map[uint64]*preexisting{}, map[uint64]connsOwner{}
	for ino, path := range selector.Namespaces() {
		if err := listNamespace(path, uint32(ino), owners, tcp, udp); err != nil {
			// Namespaces come and go; one that vanished has nothing to list.
			slog.Debug("listing connections of a network namespace", "path", path, "err", err)
		}
	}
	return tcp, udp
}

func listNamespace(path string, ino uint32, owners map[uint64]procOwner, out map[uint64]*preexisting,
	udp map[uint64]connsOwner) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	h, err := inetDiagIn(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		socks, err := h.SocketDiagTCPInfo(family)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return fmt.Errorf("sock_diag TCP dump: %w", err)
		}
		for _, s := range socks {
			m := s.InetDiagMsg
			// Time-wait and request sockets are not full sockets, and a
			// bound-only socket (CLOSE, dumped since 6.7) may be closed
			// without a state change: none would ever be reported closed.
			if m.State == tcpTimeWait || m.State == tcpSynRecv || m.State == tcpNewSynRecv || m.State == tcpClose {
				continue
			}
			cookie := uint64(m.ID.Cookie[0]) | uint64(m.ID.Cookie[1])<<32
			p := &preexisting{cookie: cookie, rec: conn.Record{
				Proto:      "tcp",
				LocalAddr:  ipAddr(m.ID.Source),
				LocalPort:  m.ID.SourcePort,
				RemoteAddr: ipAddr(m.ID.Destination),
				RemotePort: m.ID.DestinationPort,
				State:      stateName(m.State),
				Netns:      ino,
				Partial:    true,
				Cookie:     cookie,
			}}
			p.rec.Family = familyOf(p.rec.LocalAddr)
			if ti := s.TCPInfo; ti != nil {
				p.rec.PacketsIn, p.rec.PacketsOut = uint64(ti.Segs_in), uint64(ti.Segs_out)
				p.rec.RTTus, p.rec.Retrans = ti.Rtt, ti.Total_retrans
			}
			if o, ok := owners[uint64(m.INode)]; ok {
				p.rec.PID, p.rec.Comm, p.rec.Cgroup = o.pid, o.comm, termsafe.ValidUTF8(o.cgroup)
			}
			out[cookie] = p
		}
		// UDP sockets get their owner when they are created: those that
		// were created before start-up get it from /proc.
		udpSocks, err := h.SocketDiagUDP(family)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return fmt.Errorf("sock_diag UDP dump: %w", err)
		}
		for _, s := range udpSocks {
			if o, ok := owners[uint64(s.INode)]; ok {
				udp[uint64(s.ID.Cookie[0])|uint64(s.ID.Cookie[1])<<32] = kernelOwner(o.pid, o.comm, o.cgroup, ino)
			}
		}
	}
	return nil
}

// inetDiagIn opens a sock_diag handle in ns: in our own namespace without
// entering it, which takes CAP_SYS_ADMIN even there.
func inetDiagIn(ns netns.NsHandle) (*netlink.Handle, error) {
	if own, err := netns.Get(); err == nil {
		defer own.Close()
		if ns.Equal(own) {
			return netlink.NewHandle(unix.NETLINK_INET_DIAG)
		}
	}
	return netlink.NewHandleAt(ns, unix.NETLINK_INET_DIAG)
}

// adoptPreexisting gives every TCP socket that existed before start-up an
// entry in the kernel's table, so that its counters are refreshed like
// those of the others (conns_adopt, in every namespace).
func (t *Tracker) adoptPreexisting() error {
	it := t.engine.Iterator(adoptProgram)
	if it == nil {
		return nil
	}
	all := map[uint32]netns.NsHandle{}
	defer closeHandles(all)
	for ino, path := range selector.Namespaces() {
		if h, err := netns.GetFromPath(path); err == nil { // namespaces come and go
			all[uint32(ino)] = h
		}
	}
	return inEach(all, it)
}

// seedUDPOwners gives the UDP sockets that existed before start-up their
// owners, as cgroup/sock_create does for new ones.
func (t *Tracker) seedUDPOwners(owners map[uint64]connsOwner) error {
	for cookie, o := range owners {
		if err := t.objs.Owners.Update(&cookie, &o, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("recording UDP socket owners: %w", err)
		}
	}
	return nil
}

// kernelOwner is an owner as the BPF programs record it.
func kernelOwner(pid uint32, comm, cgroupPath string, netns uint32) connsOwner {
	o := connsOwner{Pid: pid, Netns: netns}
	o.CgroupId, _ = cgroup.ID(cgroupPath) // 0 (unknown) when it vanished meanwhile
	for i := 0; i < len(o.Comm) && i < len(comm); i++ {
		o.Comm[i] = int8(comm[i])
	}
	return o
}

// seedListeners tells the kernel the owners of listeners that existed before
// start-up, so that connections they accept from now on are attributed at
// once, as those of listeners created later are.
func (t *Tracker) seedListeners() error {
	for _, p := range t.preexisting {
		r := &p.rec
		if r.State != "LISTEN" || r.PID == 0 {
			continue
		}
		o := kernelOwner(r.PID, r.Comm, r.Cgroup, r.Netns)
		k := connsListenerKey{Netns: r.Netns, Port: r.LocalPort}
		if err := t.objs.Listeners.Update(&k, &o, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("recording listener owners: %w", err)
		}
	}
	return nil
}

func ipAddr(ip []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

type procOwner struct {
	pid    uint32
	comm   string
	cgroup string // path relative to the cgroup v2 root
}

// socketOwners maps socket inodes to a process holding a descriptor for
// them (the first found, reading /proc/*/fd). Processes that vanish or that we
// may not inspect are skipped.
func socketOwners() map[uint64]procOwner {
	owners := map[uint64]procOwner{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, err := strconv.ParseUint(filepath.Base(dir), 10, 32)
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			continue
		}
		var owner *procOwner
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
			if err != nil {
				continue
			}
			ino, ok := strings.CutPrefix(target, "socket:[")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 64)
			if err != nil {
				continue
			}
			if _, taken := owners[n]; taken {
				continue
			}
			if owner == nil {
				owner = &procOwner{pid: uint32(pid), comm: readComm(dir), cgroup: readCgroup(dir)}
			}
			owners[n] = *owner
		}
	}
	return owners
}

func readComm(procDir string) string {
	b, _ := os.ReadFile(filepath.Join(procDir, "comm"))
	return termsafe.ValidUTF8(strings.TrimSuffix(string(b), "\n"))
}

// readCgroup returns the process's cgroup v2 path (the "0::" line).
func readCgroup(procDir string) string {
	f, err := os.Open(filepath.Join(procDir, "cgroup"))
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if p, ok := strings.CutPrefix(s.Text(), "0::"); ok {
			return p
		}
	}
	return ""
}
