// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Family selects IPv4 or IPv6 traffic.
type Family int

// The address families.
const (
	V4 Family = 4
	V6 Family = 6
)

// addrs returns the host-side and peer-side addresses of family f.
func (p *Peer) addrs(f Family) (host, peer netip.Addr) {
	if f == V4 {
		return p.HostIP4, p.PeerIP4
	}
	return p.HostIP6, p.PeerIP6
}

// UDPToHost sends n datagrams from the peer to a socket of ours and reads
// them one by one, sleeping readDelay before each read; it returns when all
// were read.
func (p *Peer) UDPToHost(t testing.TB, f Family, n int, readDelay time.Duration) {
	t.Helper()
	host, _ := p.addrs(f)
	srv, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(host, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ReadDatagrams(t, p.DialUDP(t, srv.LocalAddr().(*net.UDPAddr)), srv, n, readDelay)
}

// DialUDP returns a UDP socket in the peer's namespace connected to addr,
// closed when the test ends.
func (p *Peer) DialUDP(t testing.TB, addr *net.UDPAddr) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	if err := p.Do(func() (err error) {
		c, err = net.DialUDP("udp", nil, addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ReadDatagrams sends n datagrams on c and reads each on srv before the next
// is sent, so every read finds exactly one datagram waiting.
func ReadDatagrams(t testing.TB, c, srv *net.UDPConn, n int, readDelay time.Duration) {
	t.Helper()
	buf := make([]byte, 64)
	for i := range n {
		if _, err := c.Write([]byte(fmt.Sprintf("datagram %d", i))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(readDelay)
		_ = srv.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := srv.Read(buf); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
	}
}

// TCPToHost opens a connection from the peer to a listener of ours and sends
// n messages; each is read (after readDelay) and acknowledged with one byte
// before the next is sent, so each is one segment and one read. It returns
// the longest exchange, an upper bound for any of those reads' waits.
func (p *Peer) TCPToHost(t testing.TB, f Family, n int, readDelay time.Duration) (longest time.Duration) {
	t.Helper()
	ours, peers := p.TCPFromPeer(t, f)
	defer peers.Close()
	defer ours.Close()
	for range n {
		start := time.Now()
		Exchange(t, ours, peers, readDelay)
		longest = max(longest, time.Since(start))
	}
	return longest
}

// TCPFromPeer opens a connection from the peer to a listener of ours over
// family f and returns our end and the peer's, both closed when the test
// ends.
func (p *Peer) TCPFromPeer(t testing.TB, f Family) (ours, peers *net.TCPConn) {
	t.Helper()
	host, _ := p.addrs(f)
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(host, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := p.Do(func() (err error) {
		peers, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peers.Close() })
	if ours, err = ln.AcceptTCP(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ours.Close() })
	return ours, peers
}

// Exchange sends a 100-byte message from peers, reads it on ours after
// readDelay and acknowledges it with one byte: one segment and one read.
func Exchange(t testing.TB, ours, peers net.Conn, readDelay time.Duration) {
	t.Helper()
	msg := make([]byte, 100)
	if _, err := peers.Write(msg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(readDelay)
	if _, err := io.ReadFull(ours, msg); err != nil {
		t.Fatalf("message: %v", err)
	}
	if _, err := ours.Write(msg[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(peers, msg[:1]); err != nil {
		t.Fatal(err)
	}
}

// SYNsToHost sends n TCP SYN segments from the peer through a raw socket.
// Segments of a real connection carry the sender's monotonic delivery time
// across the veth until ip_local_deliver_finish, which hides them from
// ip-start and tcp-start; raw ones leave with no stamp and get a fresh RX
// stamp at netif_rx, like packets from a NIC.
func (p *Peer) SYNsToHost(t testing.TB, f Family, n int) {
	t.Helper()
	segs := make([]Segment, n)
	for i := range segs {
		segs[i] = Segment{SrcPort: uint16(40000 + i), DstPort: 9, Seq: 1, Flags: FlagSYN}
	}
	p.SendSegments(t, f, segs...)
}

// TCP flags for Segment.
const (
	FlagSYN = 0x02
	FlagPSH = 0x08
	FlagACK = 0x10
)

// Segment is a TCP segment (without options) to craft.
type Segment struct {
	SrcPort, DstPort uint16
	Seq, Ack         uint32
	Flags            uint8
	Payload          []byte
}

// SendSegments sends crafted TCP segments from the peer to the host's
// address of family f through a raw socket.
func (p *Peer) SendSegments(t testing.TB, f Family, segs ...Segment) {
	t.Helper()
	host, peer := p.addrs(f)
	err := p.Do(func() error {
		domain := unix.AF_INET
		if f == V6 {
			domain = unix.AF_INET6
		}
		fd, err := unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var dst unix.Sockaddr
		if f == V4 {
			dst = &unix.SockaddrInet4{Addr: host.As4()}
		} else {
			// the kernel fills in the TCP checksum at offset 16
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_CHECKSUM, 16); err != nil {
				return err
			}
			dst = &unix.SockaddrInet6{Addr: host.As16()}
		}
		for _, s := range segs {
			if err := unix.Sendto(fd, s.marshal(peer, host), 0, dst); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// marshal encodes the segment; for IPv4 the checksum is computed over the
// pseudo header (IPv6 raw sockets compute it themselves).
func (s Segment) marshal(src, dst netip.Addr) []byte {
	seg := make([]byte, 20, 20+len(s.Payload))
	binary.BigEndian.PutUint16(seg[0:], s.SrcPort)
	binary.BigEndian.PutUint16(seg[2:], s.DstPort)
	binary.BigEndian.PutUint32(seg[4:], s.Seq)
	binary.BigEndian.PutUint32(seg[8:], s.Ack)
	seg[12] = 5 << 4 // data offset
	seg[13] = s.Flags
	binary.BigEndian.PutUint16(seg[14:], 65535)
	seg = append(seg, s.Payload...)
	if src.Is4() {
		pseudo := append(append(src.AsSlice(), dst.AsSlice()...), 0, unix.IPPROTO_TCP)
		pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(len(seg)))
		binary.BigEndian.PutUint16(seg[16:], checksum(append(pseudo, seg...)))
	}
	return seg
}

func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// UDPToPeer sends n datagrams from our namespace to a socket inside the
// peer's namespace, which we read from this process.
func (p *Peer) UDPToPeer(t testing.TB, n int) {
	t.Helper()
	var srv *net.UDPConn
	if err := p.Do(func() (err error) {
		srv, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.PeerIP4, 0)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := net.DialUDP("udp", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ReadDatagrams(t, c, srv, n, 0)
}
