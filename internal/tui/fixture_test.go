// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"net/netip"
	"time"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/kube"
)

var fixtureTime = time.Date(2026, 11, 30, 8, 15, 42, 0, time.UTC)

var fixtureHeader = Header{Host: "web-01", Kernel: "6.18.0-1-cloud-amd64", Backend: "tracepoint", Interval: time.Second}

// readWaitHeader is the fixture's header with --read-wait on.
var readWaitHeader = func() Header { h := fixtureHeader; h.ReadWait = true; return h }()

// fixture is a small host: an nginx serving two clients (one IPv6), a
// curl download, a postgres connection that predates start-up, a DNS
// resolver's UDP flows, listeners, and connections that opened and closed
// this refresh. Several rows tie on every numeric key, so sorting must
// fall back to the tie-break order.
func fixture() conn.Snapshot {
	a := netip.MustParseAddr
	rec := func(proto, local string, lport uint16, remote string, rport uint16, pid uint32, comm, state string) conn.Record {
		fam := 4
		if a(local).Is6() {
			fam = 6
		}
		return conn.Record{TS: fixtureTime, Event: conn.Update, Proto: proto, Family: fam,
			LocalAddr: a(local), LocalPort: lport, RemoteAddr: a(remote), RemotePort: rport,
			PID: pid, Comm: comm, State: state, Cgroup: "/system.slice/" + comm + ".service"}
	}
	with := func(r conn.Record, f func(*conn.Record)) conn.Record { f(&r); return r }
	recs := []conn.Record{
		with(rec("tcp", "198.18.130.1", 443, "198.18.130.2", 51544, 812, "nginx", "ESTABLISHED"), func(r *conn.Record) {
			r.BytesIn, r.BytesOut, r.PacketsIn, r.PacketsOut = 48_213, 93_512_004, 912, 64_119
			r.RateIn, r.RateOut, r.RTTus, r.Retrans = 1_204, 12_400_000, 212, 3
			r.ReadWaitP99us, r.ReadWaitSamples = 180, 40
		}),
		with(rec("tcp", "fd00:5354:130::1", 443, "fd00:5354:130::2", 40112, 812, "nginx", "ESTABLISHED"), func(r *conn.Record) {
			r.BytesIn, r.BytesOut, r.PacketsIn, r.PacketsOut = 2_048, 512_000, 12, 360
			r.RateIn, r.RateOut, r.RTTus = 310, 51_200, 95
			r.ReadWaitP99us, r.ReadWaitSamples = 95_000, 3 // nginx neglects this one
		}),
		with(rec("tcp", "0.0.0.0", 443, "0.0.0.0", 0, 812, "nginx", "LISTEN"), func(r *conn.Record) { r.Partial = true }),
		with(rec("tcp", "::", 22, "::", 0, 655, "sshd", "LISTEN"), func(r *conn.Record) { r.Partial = true }),
		with(rec("tcp", "10.1.2.3", 38214, "151.101.2.132", 443, 24117, "curl", "ESTABLISHED"), func(r *conn.Record) {
			r.Event = conn.New
			r.BytesIn, r.BytesOut, r.PacketsIn, r.PacketsOut = 3_500_000, 812, 2_420, 301
			r.RateIn, r.RateOut, r.RTTus = 3_500_000, 812, 18_250
			r.ReadWaitP99us, r.ReadWaitSamples = 1_200, 210
		}),
		with(rec("tcp", "127.0.0.1", 49822, "127.0.0.1", 5432, 2301, "python3", "ESTABLISHED"), func(r *conn.Record) {
			r.Partial = true
			r.BytesIn, r.BytesOut, r.PacketsIn, r.PacketsOut = 8_192, 1_024, 4, 4
			r.RateIn, r.RateOut, r.RTTus = 8_192, 1_024, 31
			r.ReadWaitP99us, r.ReadWaitSamples = 31, 1
		}),
		with(rec("tcp", "127.0.0.1", 5432, "127.0.0.1", 49822, 1190, "postgres", "ESTABLISHED"), func(r *conn.Record) {
			r.Cgroup = "/kubepods/pod2fc932ce-fdcc-454b-97bd-aadfdeb4c340/aaefb9d8feed"
			r.Names = kube.Names{Namespace: "db", Pod: "postgres-0", Container: "postgres"}
			r.Partial = true
			r.BytesIn, r.BytesOut, r.PacketsIn, r.PacketsOut = 1_024, 8_192, 4, 4
			r.RateIn, r.RateOut, r.RTTus = 1_024, 8_192, 28
			r.ReadWaitP99us, r.ReadWaitSamples = 12_000, 1
		}),
		with(rec("tcp", "198.18.130.1", 443, "198.18.130.7", 60002, 812, "nginx", "TIME_WAIT"), func(r *conn.Record) {
			r.Event = conn.Closed
			r.BytesIn, r.BytesOut, r.PacketsIn, r.PacketsOut = 517, 1_024, 6, 5
			r.RateIn, r.RateOut, r.RTTus = 517, 1_024, 240
		}),
		with(rec("udp", "10.1.2.3", 53211, "9.9.9.9", 53, 433, "systemd-resolved", "UDP"), func(r *conn.Record) {
			r.BytesIn, r.BytesOut, r.PacketsIn, r.PacketsOut = 310, 62, 2, 2
			r.RateIn, r.RateOut = 310, 62
			r.ReadWaitP99us, r.ReadWaitSamples = 40, 2 // one socket: its flows share it
		}),
		with(rec("udp", "10.1.2.3", 53211, "1.1.1.1", 53, 433, "systemd-resolved", "UDP"), func(r *conn.Record) {
			r.BytesIn, r.BytesOut, r.PacketsIn, r.PacketsOut = 310, 62, 2, 2
			r.RateIn, r.RateOut = 310, 62
			r.ReadWaitP99us, r.ReadWaitSamples = 40, 2 // one socket: its flows share it
		}),
		with(rec("tcp", "10.1.2.3", 40022, "140.82.112.4", 443, 24188, "git-remote-https", "SYN_SENT"), func(r *conn.Record) {
			r.Event = conn.New
			r.PacketsOut = 1
		}),
	}
	return conn.Snapshot{Time: fixtureTime, Records: recs}
}
