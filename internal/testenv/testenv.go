// SPDX-License-Identifier: Apache-2.0

// Package testenv gives integration tests what they share: the root check
// that fails under CI instead of skipping, and peer hosts in network
// namespaces connected to ours by a veth pair.
package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RequireRoot skips a test that needs root and BPF, except under CI=true,
// where the test fails: CI runs as root, so a skip there hides a defect.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root and BPF; CI runs as root, so not being root is a failure")
	}
	t.Skip("needs root and BPF (run as root)")
}

// RequireTool returns the path of an external program a test needs, such as
// busybox or clang. scripts/deps.sh installs them, so under CI=true a
// missing one fails the test; elsewhere the test is skipped. Inside a kernel
// matrix guest (GuestEnv set), whose busybox image ships no such tools by
// design, the test is skipped with NotInGuestPrefix, which the matrix lists
// apart from other skips: the tool's absence says nothing about the kernel.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if InGuest() {
		t.Skipf(NotInGuestPrefix+"%s (host-only tool; the host suites run this test)", name)
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed; scripts/deps.sh installs it", name)
	}
	t.Skipf("needs %s (scripts/deps.sh installs it)", name)
	return ""
}

// GuestEnv is set to 1 by the kernel matrix's guest init (test/kernels)
// for every suite it runs, and by nothing else.
const GuestEnv = "STACKTOP_MATRIX_GUEST"

// NotInGuestPrefix starts the skip message of a test that needs something
// the matrix guest image deliberately lacks (RequireTool); the matrix tells
// these skips apart from others by it.
const NotInGuestPrefix = "not in the guest image: "

// InGuest reports whether the test runs inside a kernel matrix guest.
func InGuest() bool { return os.Getenv(GuestEnv) == "1" }

// RequireExact fails the test for each wrong result and for lost events:
// on a real machine the tracker must be exact and lose nothing.
//
// In an emulated guest (the kernel matrix under qemu TCG) programs run so
// slowly that a task is often preempted inside one, and the kernel then
// skips (and counts) the next run of that program on the CPU: 7.x runs
// tracing programs with only migration disabled. There, and only there, the
// results are accepted when the tracker reported at least as many lost
// events as results came out wrong: a counted loss, not a silent error.
func RequireExact(t testing.TB, wrong []string, lost uint64) {
	t.Helper()
	if InGuest() && uint64(len(wrong)) <= lost {
		if lost > 0 {
			t.Logf("emulated guest: %d lost events account for %d wrong results: %q", lost, len(wrong), wrong)
		}
		return
	}
	for _, w := range wrong {
		t.Error(w)
	}
	if lost != 0 {
		t.Errorf("lost %d events; want 0", lost)
	}
}

// Peer is a host in its own network namespace, linked to the test's
// namespace by a veth pair. Addresses come from 198.18.0.0/15 (RFC 2544
// benchmarking) and fd00:5354::/32, on links that exist only for the test.
type Peer struct {
	Name      string // namespace name under /run/netns
	NS        netns.NsHandle
	HostIf    string     // veth end in the test's namespace
	HostIndex int        // its ifindex
	HostIP4   netip.Addr // address of HostIf
	PeerIP4   netip.Addr // address of the veth end inside the peer
	HostIP6   netip.Addr
	PeerIP6   netip.Addr
}

// NewPeer creates namespace name with a veth pair to the current namespace.
// subnet (1-250) picks 198.18.<subnet>.0/24 and fd00:5354:<subnet>::/64, so
// tests running side by side use distinct ones. Everything is removed when
// the test ends.
func NewPeer(t testing.TB, name string, subnet int) *Peer {
	t.Helper()
	RequireRoot(t)
	lockSubnet(t, subnet)
	p := &Peer{
		Name:    name,
		HostIf:  name + "-h",
		HostIP4: netip.MustParseAddr(fmt.Sprintf("198.18.%d.1", subnet)),
		PeerIP4: netip.MustParseAddr(fmt.Sprintf("198.18.%d.2", subnet)),
		HostIP6: netip.MustParseAddr(fmt.Sprintf("fd00:5354:%x::1", subnet)),
		PeerIP6: netip.MustParseAddr(fmt.Sprintf("fd00:5354:%x::2", subnet)),
	}
	if err := p.create(); err != nil {
		p.Destroy()
		t.Fatalf("creating peer namespace %s: %v", name, err)
	}
	t.Cleanup(p.Destroy)
	return p
}

func (p *Peer) create() error {
	removeNamed(p.Name) // left over from an interrupted run
	if l, err := netlink.LinkByName(p.HostIf); err == nil {
		_ = netlink.LinkDel(l)
	}
	runtime.LockOSThread()
	self, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	p.NS, err = netns.NewNamed(p.Name) // switches this thread into it
	if errors.Is(err, os.ErrExist) {
		// The name's file could not be removed (still mounted in another
		// mount namespace): take a name of our own instead.
		p.Name = fmt.Sprintf("%s.%d", p.Name, os.Getpid())
		removeNamed(p.Name)
		p.NS, err = netns.NewNamed(p.Name)
	}
	// NewNamed may fail after switching: never hand the thread back to
	// the scheduler outside our namespace (it would poison later tests).
	if setErr := netns.Set(self); setErr != nil {
		return errors.Join(err, setErr) // the thread stays locked and dies
	}
	runtime.UnlockOSThread()
	if err != nil {
		return err
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.HostIf}, PeerName: "eth0",
		PeerNamespace: netlink.NsFd(p.NS)}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth: %w", err)
	}
	host, err := netlink.LinkByName(p.HostIf)
	if err != nil {
		return err
	}
	p.HostIndex = host.Attrs().Index
	if err := configure(host, p.HostIP4, p.HostIP6); err != nil {
		return err
	}
	if err := p.Do(func() error {
		peer, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if lo, err := netlink.LinkByName("lo"); err == nil {
			_ = netlink.LinkSetUp(lo)
		}
		return configure(peer, p.PeerIP4, p.PeerIP6)
	}); err != nil {
		return err
	}
	return p.routable()
}

// routable waits until our namespace has a route to the peer. Setting the
// links up is synchronous, so the route should be there at once; once, on
// 5.10 under the kernel matrix, a first dial still found the network
// unreachable, and this says what the namespace looked like if it recurs.
func (p *Peer) routable() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := netlink.RouteGet(p.PeerIP4.AsSlice())
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no route to %s: %w (%s)", p.PeerIP4, err, p.Diagnose())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Diagnose describes what a test's failed dial to the peer may be up
// against: the calling thread's network namespace against the process's (a
// thread left in another namespace dials from there), the route the kernel
// picks for the peer, and the host end's link state.
func (p *Peer) Diagnose() string {
	thread, _ := os.Readlink("/proc/thread-self/ns/net")
	process, _ := os.Readlink("/proc/self/ns/net")
	route := "none"
	if rs, err := netlink.RouteGet(p.PeerIP4.AsSlice()); err != nil {
		route = err.Error()
	} else if len(rs) > 0 {
		route = rs[0].String()
	}
	link := "missing"
	if l, err := netlink.LinkByName(p.HostIf); err == nil {
		link = fmt.Sprintf("%s flags %v operstate %v", p.HostIf, l.Attrs().Flags, l.Attrs().OperState)
	}
	return fmt.Sprintf("thread in %s, process in %s; route to %s: %s; %s", thread, process, p.PeerIP4, route, link)
}

func configure(l netlink.Link, ip4, ip6 netip.Addr) error {
	for _, a := range []struct {
		ip   netip.Addr
		bits int
	}{{ip4, 24}, {ip6, 64}} {
		addr := &netlink.Addr{IPNet: netlink.NewIPNet(a.ip.AsSlice()), Flags: unix.IFA_F_NODAD}
		addr.IPNet.Mask = net.CIDRMask(a.bits, a.ip.BitLen())
		if err := netlink.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("address %s on %s: %w", a.ip, l.Attrs().Name, err)
		}
	}
	return netlink.LinkSetUp(l)
}

// Do runs fn on an OS thread switched into the peer's namespace. Sockets
// created there stay in the peer's namespace after Do returns.
func (p *Peer) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := netns.Get()
	if err != nil {
		return err
	}
	defer self.Close()
	if err := netns.Set(p.NS); err != nil {
		return err
	}
	defer netns.Set(self)
	return fn()
}

// Inode returns the peer namespace's inode number, the id `-n` and the
// kernel's net->ns.inum use.
func (p *Peer) Inode() uint64 {
	var st unix.Stat_t
	if unix.Fstat(int(p.NS), &st) != nil {
		return 0
	}
	return st.Ino
}

// Destroy removes the peer before the test ends, as when the last process
// in a namespace exits: the veth pair, our handle and its name under
// /run/netns, so nothing keeps the namespace alive but what the code under
// test holds. It runs again, doing nothing, when the test ends.
func (p *Peer) Destroy() {
	if l, err := netlink.LinkByName(p.HostIf); err == nil {
		_ = netlink.LinkDel(l)
	}
	if p.NS.IsOpen() {
		p.NS.Close()
	}
	removeNamed(p.Name)
}

// removeNamed unmounts and removes /run/netns/name. Unlike
// netns.DeleteNamed it also removes the file when it is no longer mounted.
func removeNamed(name string) {
	path := filepath.Join("/run/netns", name)
	_ = unix.Unmount(path, unix.MNT_DETACH)
	_ = os.Remove(path)
}
