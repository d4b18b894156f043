// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

// outcomeTB records how a test helper ended the test.
type outcomeTB struct {
	testing.TB
	ended string // "", "skip: ..." or "fatal: ..."
}

func (o *outcomeTB) Helper() {}
func (o *outcomeTB) Skipf(format string, args ...any) {
	o.ended = "skip: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (o *outcomeTB) Fatalf(format string, args ...any) {
	o.ended = "fatal: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// A missing tool fails under CI on the host, skips with NotInGuestPrefix in
// a matrix guest (whose image ships no such tools), and skips elsewhere.
func TestRequireToolMissing(t *testing.T) {
	const tool = "stacktop-no-such-tool"
	for _, c := range []struct{ ci, guest, want string }{
		{"true", "", "fatal: " + tool + " is not installed"},
		{"true", "1", "skip: " + NotInGuestPrefix + tool + " "},
		{"", "", "skip: needs " + tool},
	} {
		t.Setenv("CI", c.ci)
		t.Setenv(GuestEnv, c.guest)
		o := &outcomeTB{TB: t}
		done := make(chan struct{})
		go func() { defer close(done); RequireTool(o, tool) }()
		<-done
		if !strings.HasPrefix(o.ended, c.want) {
			t.Errorf("CI=%q %s=%q: %q, want prefix %q", c.ci, GuestEnv, c.guest, o.ended, c.want)
		}
	}
	t.Setenv("PATH", "/bin:/usr/bin")
	if p := RequireTool(t, "sh"); p == "" {
		t.Error("sh not found")
	}
}
