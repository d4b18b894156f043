// SPDX-License-Identifier: Apache-2.0

// Package conn defines the connection record that the tracker produces and
// every consumer (stream outputs, TUI, Prometheus collector) reads.
package conn

import (
	"net/netip"
	"time"

	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/kube"
)

// Event says why a record is emitted.
type Event string

// Events, as they appear in JSON.
const (
	Update Event = "update" // a live connection, every refresh
	New    Event = "new"    // first refresh in which the connection is seen
	Closed Event = "closed" // final totals; shown for one refresh, then gone
)

// Record is one TCP connection or UDP flow at one refresh. JSON field names
// are part of the command-line contract documented in docs/CONNECTIONS.md
// ("Fields"): scripts parse them, so never rename them.
type Record struct {
	TS         time.Time  `json:"ts"`
	Event      Event      `json:"event"`
	Proto      string     `json:"proto"`  // "tcp" or "udp"
	Family     int        `json:"family"` // 4 or 6; IPv4-mapped IPv6 counts as 4
	LocalAddr  netip.Addr `json:"local_addr"`
	LocalPort  uint16     `json:"local_port"`
	RemoteAddr netip.Addr `json:"remote_addr"`
	RemotePort uint16     `json:"remote_port"`
	RemoteHost string     `json:"remote_host"` // the remote address's name (--resolve), "" when unknown or not asked
	PID        uint32     `json:"pid"`
	Comm       string     `json:"comm"`
	Cgroup     string     `json:"cgroup"`
	kube.Names            // namespace, pod, container: named from the cgroup, empty outside pods
	Netns      uint32     `json:"netns"` // network namespace inode (as in /proc/PID/ns/net)
	State      string     `json:"state"` // TCP state name, or "UDP"
	BytesIn    uint64     `json:"bytes_in"`
	BytesOut   uint64     `json:"bytes_out"`
	PacketsIn  uint64     `json:"packets_in"`
	PacketsOut uint64     `json:"packets_out"`
	DropsIn    uint64     `json:"drops_in"` // UDP: datagrams the socket dropped (receive buffer full); 0 for TCP
	RateIn     float64    `json:"rate_in"`  // bytes/s over the last refresh
	RateOut    float64    `json:"rate_out"` // bytes/s over the last refresh
	RTTus      uint32     `json:"rtt_us"`   // smoothed RTT (srtt_us >> 3); 0 for UDP
	Retrans    uint32     `json:"retrans"`
	Partial    bool       `json:"partial"` // counting started after the connection did
	// How long received data waited in the host until the application
	// read it, over the last refresh (--read-wait; all 0 without samples):
	// p50 and p99 are bucket bounds (log2), no higher than the max.
	// UDP flows of one socket share its socket's.
	ReadWaitP50us   uint64 `json:"read_wait_p50_us"`
	ReadWaitP99us   uint64 `json:"read_wait_p99_us"`
	ReadWaitMaxus   uint64 `json:"read_wait_max_us"`
	ReadWaitSamples uint64 `json:"read_wait_samples"`
	// Cookie is the key of the socket's kernel entry: its socket cookie
	// (before 5.12, possibly its address). UDP flows of one socket share it.
	Cookie uint64 `json:"-"`
	// Sk is a TCP socket's kernel address (0 when unknown): before 5.12 the
	// read-wait histograms are keyed by it, and SkID tells this socket's
	// from those of other sockets that had or will have that address.
	Sk   uint64 `json:"-"`
	SkID uint32 `json:"-"`
	// ReadWait is the histogram behind the read_wait fields, nil without
	// samples; records of one socket share it. Valid until the snapshot
	// after the next one is taken.
	ReadWait *hist.Wait `json:"-"`
}

// Snapshot is everything known at one refresh, with the loss counters that
// every output must show.
type Snapshot struct {
	Time    time.Time
	Records []Record
	Lost    uint64 // events the kernel could not deliver (ring buffer full, program run skipped), since start
	MapFull uint64 // updates dropped because a BPF map was full, since start
}
