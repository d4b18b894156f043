// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/testenv"
)

// TestHeadOfLineBlockedReads: a segment injected beyond a hole lands in the
// receiver's out-of-order queue; the read that follows the hole's filling
// may have waited for it, so it is excluded by default (counted as
// hol_blocked) and included with -y. A later read past the out-of-order
// data counts again.
func TestHeadOfLineBlockedReads(t *testing.T) {
	p := testenv.NewPeer(t, "stl-hol", 14)
	for _, include := range []bool{false, true} {
		name := map[bool]string{false: "excluded by default", true: "included with -y"}[include]
		t.Run(name, func(t *testing.T) {
			tr := start(t, Config{Hooks: DefaultHooks, Ifindexes: []uint32{uint32(p.HostIndex)}, IncludeHOL: include})
			waitForStamps(t, tr, p)
			client, server := tcpPair(t, p)
			exchange := func(n int) uint64 {
				t.Helper()
				before := totals(t, tr)
				if _, err := client.Write(make([]byte, n)); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(server, make([]byte, n)); err != nil {
					t.Fatal(err)
				}
				return delta(before, totals(t, tr)).of(TCPSocketRead).Count()
			}
			if got := exchange(100); got != 1 {
				t.Fatalf("in-order read counted %d times, want 1", got)
			}
			// 100 bytes from one past a 100-byte hole: out of order
			seq, ack := repairSeqs(t, client)
			local := client.LocalAddr().(*net.TCPAddr).AddrPort()
			remote := client.RemoteAddr().(*net.TCPAddr).AddrPort()
			p.SendSegments(t, testenv.V4, testenv.Segment{SrcPort: local.Port(), DstPort: remote.Port(),
				Seq: seq + 100, Ack: ack, Flags: testenv.FlagACK | testenv.FlagPSH, Payload: make([]byte, 100)})
			time.Sleep(50 * time.Millisecond)
			holCounted := exchange(200) // fills the hole and covers the injected bytes
			if want := map[bool]uint64{false: 0, true: 1}[include]; holCounted != want {
				t.Errorf("read after the hole was filled counted %d times, want %d", holCounted, want)
			}
			if got := exchange(100); got != 1 {
				t.Errorf("read past the out-of-order data counted %d times, want 1", got)
			}
			counters, err := tr.Counters()
			if err != nil {
				t.Fatal(err)
			}
			var hol uint64
			for _, c := range counters {
				if c.Hook == TCPSocketRead.String() && c.Reason == "hol_blocked" {
					hol = c.Count
				}
			}
			if want := map[bool]uint64{false: 1, true: 0}[include]; hol != want {
				t.Errorf("hol_blocked counter %d, want %d", hol, want)
			}
		})
	}
}

// tcpPair connects a client in the peer (without TCP timestamps, so crafted
// segments need no options) to a listener of ours.
func tcpPair(t *testing.T, p *testenv.Peer) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(p.HostIP4, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := p.Do(func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/tcp_timestamps", []byte("0"), 0); err != nil {
			return err
		}
		client, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	if server, err = ln.AcceptTCP(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

// repairSeqs reads a connection's next send sequence number and the next
// sequence number it expects, through TCP_REPAIR (CAP_NET_ADMIN).
func repairSeqs(t *testing.T, c *net.TCPConn) (snd, rcv uint32) {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var opErr error
	err = raw.Control(func(fd uintptr) {
		get := func(queue int) uint32 {
			if opErr == nil {
				opErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, queue)
			}
			var v int
			if opErr == nil {
				v, opErr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ)
			}
			return uint32(v)
		}
		if opErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_REPAIR, 1); opErr != nil {
			return
		}
		snd, rcv = get(tcpSendQueue), get(tcpRecvQueue)
		if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_REPAIR, unix.TCP_REPAIR_OFF_NO_WP); opErr == nil {
			opErr = err
		}
	})
	if err != nil || opErr != nil {
		t.Fatalf("TCP_REPAIR: %v %v", err, opErr)
	}
	return snd, rcv
}

// Queues for TCP_REPAIR_QUEUE (include/uapi/linux/tcp.h).
const (
	tcpRecvQueue = 1
	tcpSendQueue = 2
)
