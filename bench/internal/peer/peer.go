// SPDX-License-Identifier: Apache-2.0

// Package peer creates the benchmark's second host: a network namespace
// linked to ours by a veth pair, so traffic crosses a real device and the
// whole receive path instead of loopback's shortcut.
package peer

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// Peer is a namespace with a veth pair to the current one (or, made by
// Loopback, without: then only Name is set).
type Peer struct {
	Name    string     // namespace name under /run/netns
	HostIf  string     // veth end in our namespace
	HostIP4 netip.Addr // address of HostIf
	PeerIP4 netip.Addr // address inside the peer
}

// New creates namespace name with addresses 198.18.<subnet>.1 (ours) and
// .2 (the peer's), from the range RFC 2544 reserves for benchmarking.
// Leftovers of an interrupted run with the same name are removed first.
func New(name string, subnet int) (*Peer, error) {
	p := &Peer{
		Name:    name,
		HostIf:  name + "-h",
		HostIP4: netip.AddrFrom4([4]byte{198, 18, byte(subnet), 1}),
		PeerIP4: netip.AddrFrom4([4]byte{198, 18, byte(subnet), 2}),
	}
	p.Close()
	steps := [][]string{
		{"netns", "add", p.Name},
		{"link", "add", p.HostIf, "type", "veth", "peer", "name", "eth0", "netns", p.Name},
		{"addr", "add", p.HostIP4.String() + "/24", "dev", p.HostIf},
		{"link", "set", p.HostIf, "up"},
		{"-n", p.Name, "addr", "add", p.PeerIP4.String() + "/24", "dev", "eth0"},
		{"-n", p.Name, "link", "set", "eth0", "up"},
		{"-n", p.Name, "link", "set", "lo", "up"},
	}
	for _, args := range steps {
		if err := ip(args...); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Loopback creates namespace name with nothing but its loopback device, up:
// a namespace such as a pod's, for load that stays inside it. Leftovers of
// an interrupted run with the same name are removed first.
func Loopback(name string) (*Peer, error) {
	p := &Peer{Name: name}
	p.Close()
	if err := ip("netns", "add", p.Name); err != nil {
		return nil, err
	}
	if err := ip("-n", p.Name, "link", "set", "lo", "up"); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Command returns cmd prepared to run inside the peer's namespace.
func (p *Peer) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", p.Name, name}, args...)...)
}

// Close removes the namespace and the veth pair; it is safe to call on a
// partly created peer.
func (p *Peer) Close() {
	if p.HostIf != "" {
		_ = ip("link", "del", p.HostIf)
	}
	_ = ip("netns", "del", p.Name)
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
