// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/conn"
)

// TCP states (include/net/tcp_states.h) that the tracker treats specially.
const (
	tcpSynSent    = 2
	tcpSynRecv    = 3
	tcpTimeWait   = 6
	tcpClose      = 7
	tcpNewSynRecv = 12
)

var tcpStates = [...]string{
	1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
	7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING", 12: "NEW_SYN_RECV",
}

func stateName(s uint8) string {
	if int(s) < len(tcpStates) && tcpStates[s] != "" {
		return tcpStates[s]
	}
	return "STATE_" + strconv.Itoa(int(s))
}

// addr converts a kernel address (4 or 16 bytes used) to netip; IPv4-mapped
// IPv6 addresses become IPv4.
func addr(family uint16, b [16]uint8) netip.Addr {
	if family == unix.AF_INET {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b).Unmap()
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// tcpRecord converts a kernel TCP entry; the caller sets event and rates.
func (t *Tracker) tcpRecord(c *connsConn) conn.Record {
	r := conn.Record{
		Proto:      "tcp",
		LocalAddr:  addr(c.Family, c.Saddr),
		LocalPort:  c.Sport,
		RemoteAddr: addr(c.Family, c.Daddr),
		RemotePort: c.Dport,
		State:      stateName(c.State),
		BytesIn:    c.BytesIn,
		BytesOut:   c.BytesOut,
		PacketsIn:  c.PacketsIn,
		PacketsOut: c.PacketsOut,
		RTTus:      c.SrttUs,
		Retrans:    c.Retrans,
		Partial:    c.Flags&connsConnFlagsCONN_PARTIAL != 0,
		Cookie:     c.Cookie,
		Sk:         c.Sk,
		SkID:       c.SkId,
	}
	r.Family = familyOf(r.LocalAddr)
	t.setOwner(&r, &c.Owner, 0)
	// A socket listed at start-up but seen idle until now has had no
	// process-context event yet: its owner comes from /proc.
	if p, ok := t.preexisting[c.Cookie]; ok && r.PID == 0 {
		r.PID, r.Comm, r.Cgroup = p.rec.PID, p.rec.Comm, p.rec.Cgroup
	}
	return r
}

// udpRecord converts a kernel UDP flow; the caller sets event and rates.
func (t *Tracker) udpRecord(k *connsFlowKey, f *connsFlow) conn.Record {
	r := conn.Record{
		Proto:      "udp",
		LocalAddr:  addr(k.Family, k.Laddr),
		LocalPort:  k.Lport,
		RemoteAddr: addr(k.Family, k.Raddr),
		RemotePort: k.Rport,
		State:      "UDP",
		BytesIn:    f.BytesIn,
		BytesOut:   f.BytesOut,
		PacketsIn:  f.PacketsIn,
		PacketsOut: f.PacketsOut,
		DropsIn:    f.DropsIn,
		Cookie:     k.Cookie,
	}
	r.Family = familyOf(r.LocalAddr)
	t.setOwner(&r, &f.Owner, f.CgroupId)
	return r
}

// setOwner fills the owner fields; cgroupID stands in for the owner's
// cgroup while the owner is not known yet.
func (t *Tracker) setOwner(r *conn.Record, o *connsOwner, cgroupID uint64) {
	r.PID, r.Comm, r.Netns = o.Pid, t.scratch.comm(o.Comm), o.Netns
	if o.CgroupId != 0 {
		cgroupID = o.CgroupId
	}
	if cgroupID != 0 {
		r.Cgroup = t.cgroups.Path(cgroupID)
	}
}
