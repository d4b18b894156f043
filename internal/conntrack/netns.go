package conntrack

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"

	"github.com/stacktop/stacktop/internal/selector"
)

// namespaceSet holds a handle on each network namespace that has tracked
// TCP sockets: the counter iterator walks one namespace at a time, the one
// of the thread that opens it.
type namespaceSet struct {
	handles map[uint32]netns.NsHandle // by inode
	want    map[uint32]struct{}       // namespaces of the last snapshot's entries
}

// refreshCounters runs conns_refresh in every namespace that has tracked
// sockets: those of the last snapshot's entries, and those the kernel
// reported new since (netns_new, which is emptied). A namespace that can
// no longer be found has no socket left to refresh; the handle of one that
// has no entry left is closed, so that it can go away.
func (t *Tracker) refreshCounters() error {
	it := t.engine.Iterator(refreshProgram)
	if it == nil {
		return nil
	}
	n := &t.netns
	want := n.want
	var ino uint32
	var one uint8
	var fresh []uint32
	entries := t.objs.NetnsNew.Iterate()
	for entries.Next(&ino, &one) {
		want[ino] = struct{}{}
		fresh = append(fresh, ino)
	}
	if err := entries.Err(); err != nil {
		return fmt.Errorf("reading new namespaces: %w", err)
	}
	for _, ino := range fresh {
		if err := t.objs.NetnsNew.Delete(ino); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("taking new namespaces: %w", err)
		}
	}
	var paths map[uint64]string // looked up once, when a namespace is new to us
	for ino := range want {
		if _, ok := n.handles[ino]; ok {
			continue
		}
		if paths == nil {
			paths = selector.Namespaces()
		}
		path, alive := paths[uint64(ino)]
		if !alive {
			continue
		}
		if h, err := netns.GetFromPath(path); err == nil {
			n.handles[ino] = h
		}
	}
	for ino, h := range n.handles {
		if _, ok := want[ino]; !ok {
			h.Close()
			delete(n.handles, ino)
		}
	}
	return inEach(n.handles, it)
}

// keep notes the namespaces of the entries of a snapshot.
func (n *namespaceSet) keep(entries []connsConn) {
	clear(n.want)
	for i := range entries {
		n.want[entries[i].Owner.Netns] = struct{}{}
	}
}

func (n *namespaceSet) close() { closeHandles(n.handles) }

func closeHandles(handles map[uint32]netns.NsHandle) {
	for ino, h := range handles {
		h.Close()
		delete(handles, ino)
	}
}

// inEach reads the iterator once in each namespace, on one thread that
// returns to its own namespace afterwards. A namespace that cannot be
// entered (it vanished meanwhile) is skipped.
func inEach(handles map[uint32]netns.NsHandle, it *link.Iter) error {
	if len(handles) == 0 {
		return nil
	}
	runtime.LockOSThread()
	home, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("own network namespace: %w", err)
	}
	defer home.Close()
	var errs []error
	away := false // entering a namespace, one's own too, takes CAP_SYS_ADMIN
	for ino, h := range handles {
		if h.Equal(home) && !away {
			errs = append(errs, readIterator(it))
			continue
		}
		if err := netns.Set(h); err != nil {
			slog.Debug("entering a network namespace", "netns", ino, "err", err)
			continue
		}
		away = true
		errs = append(errs, readIterator(it))
	}
	if !away {
		runtime.UnlockOSThread()
		return errors.Join(errs...)
	}
	if err := netns.Set(home); err != nil {
		// The thread stays locked, and ends with its goroutine's, rather
		// than run other goroutines in a foreign namespace.
		return fmt.Errorf("returning to own network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return errors.Join(errs...)
}
