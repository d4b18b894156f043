// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/stacktop/stacktop/internal/termsafe"
)

// SlowEvent is one packet whose latency at a hook exceeded Config.Slow (the
// JSON of `latency --slow`). Local is this host's end, remote the peer's.
// PID, Comm and Cgroup are the reading task's and known at the socket-read
// hooks only (elsewhere the current task is whoever softirq processing
// interrupted); 0 and "" elsewhere.
type SlowEvent struct {
	Event      string     `json:"event"` // always "slow"
	TS         time.Time  `json:"ts"`
	Hook       string     `json:"hook"`
	LatencyNS  uint64     `json:"latency_ns"`
	Proto      string     `json:"proto"`      // tcp, udp, icmp, icmpv6, the protocol number, or "" when unknown
	Family     int        `json:"family"`     // 4, 6, or 0 when the addresses are unknown
	LocalAddr  netip.Addr `json:"local_addr"` // "" when unknown
	LocalPort  uint16     `json:"local_port"`
	RemoteAddr netip.Addr `json:"remote_addr"` // unspecified (0.0.0.0, ::) when the socket is not connected
	RemotePort uint16     `json:"remote_port"`
	Iface      string     `json:"iface"`
	Netns      uint32     `json:"netns"`
	PID        uint32     `json:"pid"`
	Comm       string     `json:"comm"`
	Cgroup     string     `json:"cgroup"`
	// Earlier is the latency the same packet showed at each earlier
	// enabled hook that saw it, ns by hook name; absent where it is not
	// known (see docs/LATENCY.md).
	Earlier map[string]uint64 `json:"earlier_ns,omitempty"`
}

// SlowDrops counts the slow packets not reported, since Start.
type SlowDrops struct {
	RingFull uint64 `json:"lost"`    // the ring buffer was full: user space did not keep up
	Limited  uint64 `json:"limited"` // over Config.SlowLimit in their second
}

// What ReadSlow returns once the events queued before FlushSlow were read,
// and once the tracer is closed.
var (
	ErrSlowFlushed = ringbuf.ErrFlushed
	ErrSlowClosed  = ringbuf.ErrClosed
)

// slowReader decodes the ring buffer's events; names are resolved as they
// come, the interface names refreshed when an index is new.
type slowReader struct {
	ring  *ringbuf.Reader
	names *ifaceNamer
}

// ReadSlow blocks until the next slow event (Config.Slow must be set). It
// returns ErrSlowClosed once the tracer is closed and ErrSlowFlushed after
// FlushSlow; call it from one goroutine.
func (t *Tracer) ReadSlow() (SlowEvent, error) {
	if t.slow == nil {
		return SlowEvent{}, errors.New("slow events were not asked for (Config.Slow)")
	}
	rec, err := t.slow.ring.Read()
	if err != nil {
		return SlowEvent{}, err
	}
	var raw latencySlowEvent
	if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &raw); err != nil {
		return SlowEvent{}, fmt.Errorf("decoding a slow event of %d bytes: %w", len(rec.RawSample), err)
	}
	return t.slowEvent(&raw), nil
}

// FlushSlow makes ReadSlow return the events already queued, then
// ErrSlowFlushed, so a last report can follow every event before it.
func (t *Tracer) FlushSlow() error {
	if t.slow == nil {
		return nil
	}
	return t.slow.ring.Flush()
}

func (t *Tracer) slowEvent(raw *latencySlowEvent) SlowEvent {
	ev := SlowEvent{Event: "slow", TS: time.Unix(0, raw.Ts).UTC(), Hook: t.hookName(Hook(raw.Hook)),
		LatencyNS: raw.Latency, Proto: protoName(raw.Proto), Netns: raw.Netns,
		LocalPort: raw.LocalPort, RemotePort: raw.RemotePort}
	if local, remote, ok := addrsOf(raw); ok {
		ev.LocalAddr, ev.RemoteAddr = local, remote
		ev.Family = 6
		if local.Is4() {
			ev.Family = 4
		}
	}
	if raw.Ifindex != 0 {
		ev.Iface = t.slow.ifaceName(raw.Ifindex, raw.Netns)
	}
	if raw.Pid != 0 {
		ev.PID, ev.Comm = raw.Pid, commString(raw.Comm)
	}
	if raw.Cgroup != 0 {
		ev.Cgroup = t.cgroups.name(raw.Cgroup)
	}
	for h, ns := range raw.Earlier {
		if ns != 0 {
			if ev.Earlier == nil {
				ev.Earlier = map[string]uint64{}
			}
			ev.Earlier[Hook(h).String()] = ns
		}
	}
	return ev
}

// addrsOf reads the event's addresses; IPv4-mapped IPv6 addresses (a dual-stack
// socket's IPv4 peers) are shown as IPv4.
func addrsOf(raw *latencySlowEvent) (local, remote netip.Addr, ok bool) {
	const afInet, afInet6 = 2, 10
	switch raw.Family {
	case afInet:
		return netip.AddrFrom4([4]byte(raw.LocalAddr[:4])), netip.AddrFrom4([4]byte(raw.RemoteAddr[:4])), true
	case afInet6:
		return netip.AddrFrom16(raw.LocalAddr).Unmap(), netip.AddrFrom16(raw.RemoteAddr).Unmap(), true
	}
	return netip.Addr{}, netip.Addr{}, false
}

func protoName(p uint8) string {
	switch p {
	case 0:
		return ""
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "icmpv6"
	}
	return strconv.Itoa(int(p))
}

// ifaceName names interface idx of namespace netns (other namespaces'
// indexes name other interfaces, see ifaceNamer). Interfaces come and go
// while the reader runs: an index our namespace's names lack dumps them
// again (at most slow_limit events a second do).
func (r *slowReader) ifaceName(idx, netns uint32) string {
	ns := uint64(netns)
	if _, ok := r.names.names[ns][idx]; !ok && ns == r.names.own {
		delete(r.names.names, ns)
	}
	return r.names.name(ns, idx)
}

// SlowDrops returns how many slow packets were not reported, and why.
func (t *Tracer) SlowDrops() (SlowDrops, error) {
	t.mapsMu.RLock()
	defer t.mapsMu.RUnlock()
	m := t.objs.SlowDrops
	if m == nil {
		return SlowDrops{}, fmt.Errorf("tracer is closed")
	}
	var n [2]uint64
	for i := range n {
		var perCPU []uint64
		if err := m.Lookup(uint32(i), &perCPU); err != nil {
			return SlowDrops{}, fmt.Errorf("reading the slow-event drops: %w", err)
		}
		for _, v := range perCPU {
			n[i] += v
		}
	}
	return SlowDrops{RingFull: n[0], Limited: n[1]}, nil
}

// WriteSlowText prints an event on one line: time, hook, latency, protocol,
// local > remote, then what is known of interface, namespace and reader.
// Names a local user chooses (comm, cgroup, interface) are escaped.
func WriteSlowText(w io.Writer, ev SlowEvent) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s slow %s %s %s", ev.TS.Format(time.RFC3339Nano), ev.Hook,
		time.Duration(ev.LatencyNS), cmp.Or(ev.Proto, "-"))
	if ev.Family != 0 {
		fmt.Fprintf(&b, " %s > %s", netip.AddrPortFrom(ev.LocalAddr, ev.LocalPort),
			netip.AddrPortFrom(ev.RemoteAddr, ev.RemotePort))
	}
	if ev.Iface != "" {
		fmt.Fprintf(&b, " iface=%s", termsafe.String(ev.Iface))
	}
	fmt.Fprintf(&b, " netns=%d", ev.Netns)
	if ev.PID != 0 {
		fmt.Fprintf(&b, " pid=%d comm=%s", ev.PID, termsafe.String(ev.Comm))
	}
	if ev.Cgroup != "" {
		fmt.Fprintf(&b, " cgroup=%s", termsafe.String(ev.Cgroup))
	}
	if len(ev.Earlier) > 0 {
		b.WriteString(" earlier")
		for _, h := range Hooks { // in stack order
			if ns, ok := ev.Earlier[h.String()]; ok {
				fmt.Fprintf(&b, " %s=%s", h, time.Duration(ns))
			}
		}
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteSlowJSON prints an event as one JSON object and line.
func WriteSlowJSON(w io.Writer, ev SlowEvent) error {
	return json.NewEncoder(w).Encode(ev)
}
