// SPDX-License-Identifier: Apache-2.0

package attach

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Netns is the set of network namespaces netfilter programs attach in: a
// netfilter link sees only the namespace it was created in.
type Netns struct {
	Own uint64 // inode of our own namespace, which needs no setns
	// Members lists the namespaces of the scope, by inode, with a path
	// that opens each; nil means our own alone.
	Members func() map[uint64]string
	// Follow: the scope changes while the engine runs (every namespace).
	// A namespace that cannot be attached to (it may be vanishing) is
	// logged and skipped rather than failing the hook, and Engine.Resync
	// attaches to those created since and releases those gone.
	Follow bool
}

func (s *Netns) members() map[uint64]string {
	if s.Members == nil {
		return map[uint64]string{s.Own: "/proc/self/ns/net"}
	}
	return s.Members()
}

// netfilterLinks is one program hooked into netfilter for IPv4 and IPv6 in
// every namespace of the scope, each pair created from a thread switched
// into its namespace.
type netfilterLinks struct {
	prog  *ebpf.Program
	point NetfilterPoint

	mu      sync.Mutex
	inNS    map[uint64]*nsLinks
	refused map[uint64]bool // namespaces not to retry while they live
}

// nsLinks are the links in one namespace and a handle that keeps the
// namespace alive while they exist: a netfilter link holds no reference to
// its namespace, and releasing it after the namespace is gone is unsafe.
type nsLinks struct {
	handle netns.NsHandle
	links  []link.Link
}

func (n *nsLinks) close() error {
	var errs []error
	for _, l := range n.links {
		errs = append(errs, l.Close())
	}
	if n.handle.IsOpen() {
		errs = append(errs, n.handle.Close())
	}
	return errors.Join(errs...)
}

func newNetfilterLinks(prog *ebpf.Program, point NetfilterPoint, scope *Netns) (*netfilterLinks, error) {
	a := &netfilterLinks{prog: prog, point: point, inNS: map[uint64]*nsLinks{}, refused: map[uint64]bool{}}
	if err := a.sync(scope, !scope.Follow); err != nil {
		return nil, errors.Join(err, a.close())
	}
	return a, nil
}

// priorityTries bounds the search for a free priority: netfilter refuses a
// second BPF program at the same hook and priority (EBUSY), which another
// stacktop, or another tool's program, may already hold.
const priorityTries = 16

// linkHere attaches the program for both families in the calling thread's
// namespace, at the configured priority or the nearest free one towards
// the middle.
func (a *netfilterLinks) linkHere() ([]link.Link, error) {
	var links []link.Link
	fail := func(err error) ([]link.Link, error) {
		for _, done := range links {
			done.Close()
		}
		return nil, err
	}
	step := int32(1)
	if a.point.Priority > 0 {
		step = -1
	}
	for _, pf := range []link.NetfilterProtocolFamily{link.NetfilterProtoIPv4, link.NetfilterProtoIPv6} {
		var err error
		for i := range int32(priorityTries) {
			var l link.Link
			l, err = link.AttachNetfilter(link.NetfilterOptions{Program: a.prog, ProtocolFamily: pf,
				Hook: a.point.Hook, Priority: a.point.Priority + i*step})
			if err == nil {
				links = append(links, l)
				break
			}
			if !errors.Is(err, unix.EBUSY) {
				return fail(err)
			}
		}
		if err != nil {
			return fail(fmt.Errorf("no free priority near %d: %w", a.point.Priority, err))
		}
	}
	return links, nil
}

// sync attaches in namespaces of the scope that appeared and detaches from
// those that are gone. With strict, any failure is returned; otherwise (when
// following namespaces) it is logged, since a namespace may vanish mid-way.
func (a *netfilterLinks) sync(scope *Netns, strict bool) error {
	want := scope.members()
	a.mu.Lock()
	defer a.mu.Unlock()
	for ino, n := range a.inNS {
		if _, ok := want[ino]; !ok {
			if err := n.close(); err != nil {
				slog.Warn("detaching netfilter link from a vanished namespace", "netns", ino, "err", err)
			}
			delete(a.inNS, ino)
		}
	}
	for ino := range a.refused {
		if _, ok := want[ino]; !ok {
			delete(a.refused, ino)
		}
	}
	for ino, path := range want {
		if _, ok := a.inNS[ino]; ok || a.refused[ino] {
			continue
		}
		n := &nsLinks{handle: netns.None()}
		var err error
		if ino == scope.Own {
			n.links, err = a.linkHere()
		} else {
			n.handle, err = inNetns(path, func() (err error) {
				n.links, err = a.linkHere()
				return err
			})
		}
		if err != nil {
			err = fmt.Errorf("netfilter link in netns %d: %w", ino, err)
			if strict {
				return err
			}
			slog.Warn("not attaching in this namespace", "err", err)
			a.refused[ino] = true
			continue
		}
		a.inNS[ino] = n
	}
	return nil
}

// namespaces lists the inodes of the namespaces with links.
func (a *netfilterLinks) namespaces() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]uint64, 0, len(a.inNS))
	for ino := range a.inNS {
		out = append(out, ino)
	}
	return out
}

// close releases the links; the program is the caller's.
func (a *netfilterLinks) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for ino, n := range a.inNS {
		errs = append(errs, n.close())
		delete(a.inNS, ino)
	}
	return errors.Join(errs...)
}

// inNetns runs fn on an OS thread switched into the namespace at path and
// back. (A thread left locked is not always discarded: Go keeps the main
// thread, and /proc/self/ns/net follows the main thread.)
// The open handle is returned so the caller can keep the namespace alive for
// as long as objects created in it (netfilter links) exist.
func inNetns(path string, fn func() error) (netns.NsHandle, error) {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return netns.None(), err
	}
	self, err := netns.Get()
	if err != nil {
		target.Close()
		return netns.None(), err
	}
	defer self.Close()
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		err := fn()
		if restoreErr := netns.Set(self); restoreErr != nil {
			// Stay locked: the thread ends with this goroutine instead
			// of running others in the wrong namespace.
			done <- errors.Join(err, restoreErr)
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	if err := <-done; err != nil {
		target.Close()
		return netns.None(), err
	}
	return target, nil
}
