package latency

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/selector"
)

// attachment is a loaded program attached wherever it needs to be; several
// hooks may share one (tcp-start and udp-start share the LOCAL_IN program).
type attachment interface {
	Close() error
}

type tracingAttachment struct {
	prog *ebpf.Program
	link link.Link
}

func attachTracing(prog *ebpf.Program) (attachment, error) {
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	if err != nil {
		return nil, err
	}
	return &tracingAttachment{prog: prog, link: l}, nil
}

func (a *tracingAttachment) Close() error {
	return errors.Join(a.link.Close(), a.prog.Close())
}

// Netfilter priorities: the kernel refuses exactly NF_IP_PRI_FIRST (INT_MIN)
// and NF_IP_PRI_LAST (INT_MAX), so first and last are one step inside.
const (
	nfFirst = math.MinInt32 + 1
	nfLast  = math.MaxInt32 - 1
)

// netfilterAttachment is one program hooked into netfilter for IPv4 and IPv6
// in every namespace of the tracer's scope. A netfilter link sees only the
// namespace it was created in, so each namespace gets its own pair of links,
// created from a thread switched into it.
type netfilterAttachment struct {
	prog     *ebpf.Program
	hook     link.NetfilterInetHook
	priority int32

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

func newNetfilterAttachment(prog *ebpf.Program, hook link.NetfilterInetHook, priority int32, scope *netnsScope) (attachment, error) {
	a := &netfilterAttachment{prog: prog, hook: hook, priority: priority, inNS: map[uint64]*nsLinks{},
		refused: map[uint64]bool{}}
	// With every namespace in scope, one that cannot be attached to (it
	// may be vanishing) must not prevent watching the others.
	if err := a.sync(scope, scope.mode != AllNetns); err != nil {
		return nil, errors.Join(err, a.Close())
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
func (a *netfilterAttachment) linkHere() ([]link.Link, error) {
	var links []link.Link
	fail := func(err error) ([]link.Link, error) {
		for _, done := range links {
			done.Close()
		}
		return nil, err
	}
	step := int32(1)
	if a.priority > 0 {
		step = -1
	}
	for _, pf := range []link.NetfilterProtocolFamily{link.NetfilterProtoIPv4, link.NetfilterProtoIPv6} {
		var err error
		for i := range int32(priorityTries) {
			var l link.Link
			l, err = link.AttachNetfilter(link.NetfilterOptions{Program: a.prog, ProtocolFamily: pf,
				Hook: a.hook, Priority: a.priority + i*step})
			if err == nil {
				links = append(links, l)
				break
			}
			if !errors.Is(err, unix.EBUSY) {
				return fail(err)
			}
		}
		if err != nil {
			return fail(fmt.Errorf("no free priority near %d: %w", a.priority, err))
		}
	}
	return links, nil
}

// sync attaches in namespaces of the scope that appeared and detaches from
// those that are gone. With strict, any failure is returned; otherwise (when
// following namespaces) it is logged, since a namespace may vanish mid-way.
func (a *netfilterAttachment) sync(scope *netnsScope, strict bool) error {
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
		if ino == scope.own {
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

func (a *netfilterAttachment) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for ino, n := range a.inNS {
		errs = append(errs, n.close())
		delete(a.inNS, ino)
	}
	return errors.Join(append(errs, a.prog.Close())...)
}

// netnsScope is the set of namespaces netfilter hooks are attached in.
type netnsScope struct {
	mode int64  // OwnNetns, AllNetns or an inode
	own  uint64 // inode of our own namespace
}

func (s *netnsScope) members() map[uint64]string {
	switch s.mode {
	case OwnNetns:
		return map[uint64]string{s.own: "/proc/self/ns/net"}
	case AllNetns:
		return selector.Namespaces()
	}
	if p, ok := selector.Namespaces()[uint64(s.mode)]; ok {
		return map[uint64]string{uint64(s.mode): p}
	}
	return nil
}

// ifaceNetns is the namespace a histogram's interface is in: the one its key
// names when grouping across namespaces (keyed 0 otherwise), else the only
// one in scope.
func (s *netnsScope) ifaceNetns(keyed uint32) uint64 {
	switch {
	case keyed != 0:
		return uint64(keyed)
	case s.mode > 0:
		return uint64(s.mode)
	}
	return s.own
}

// bpfFilter is the namespace inode the BPF programs filter on (0: none).
func (s *netnsScope) bpfFilter() uint32 {
	switch s.mode {
	case OwnNetns:
		return uint32(s.own)
	case AllNetns:
		return 0
	}
	return uint32(s.mode)
}
