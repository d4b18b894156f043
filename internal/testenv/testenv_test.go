package testenv

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPeerReachable proves the veth pair carries traffic both ways over IPv4
// and IPv6: a UDP datagram from the peer arrives at a socket in our namespace.
func TestPeerReachable(t *testing.T) {
	p := NewPeer(t, "stt-env", 250)
	for _, pair := range [][2]string{{p.HostIP4.String(), p.PeerIP4.String()}, {p.HostIP6.String(), p.PeerIP6.String()}} {
		srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(pair[0])})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		var c *net.UDPConn
		if err := p.Do(func() (err error) {
			c, err = net.DialUDP("udp", nil, srv.LocalAddr().(*net.UDPAddr))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		_ = srv.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 16)
		n, from, err := srv.ReadFromUDP(buf)
		if err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("read %q from %v: %v", buf[:n], from, err)
		}
		if from.IP.String() != pair[1] {
			t.Fatalf("datagram from %v, want %s", from.IP, pair[1])
		}
	}
}

// TestPeerReplacesStaleNamespaceFile: a /run/netns file left behind without
// its mount (an interrupted run, or an unmount that could not remove it)
// does not stop a peer of the same name from being created.
func TestPeerReplacesStaleNamespaceFile(t *testing.T) {
	RequireRoot(t)
	const name = "stl-stale"
	stale := filepath.Join("/run/netns", name)
	if err := os.WriteFile(stale, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	p := NewPeer(t, name, 16)
	p.UDPToHost(t, V4, 1, 0)
}
