// SPDX-License-Identifier: Apache-2.0

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

// refreshEntries refreshes the entries just read from the kernel's table
// (keys and entries, in place) with conns_refresh: it hands it the
// entries, a batch at a time (refresh_batch's size), and takes them back
// refreshed. An entry still in the table whose socket is gone (its
// destruction was lost, and counted) is deleted and goes to the closed
// events (s.ghosts), with its counters as of the last refresh.
func (t *Tracker) refreshEntries(prog *ebpf.Program, keys []uint64, entries []connsConn) error {
	s := &t.scratch
	batch := int(t.objs.RefreshBatch.MaxEntries())
	if len(s.batchIndex) != batch {
		s.batchIndex = make([]uint32, batch)
		for i := range s.batchIndex {
			s.batchIndex[i] = uint32(i)
		}
		s.refreshed = make([]connsConn, batch)
	}
	s.ghosts = s.ghosts[:0]
	for start := 0; start < len(keys); start += batch {
		n := min(batch, len(keys)-start)
		index := s.batchIndex[:n]
		if _, err := t.objs.RefreshBatch.BatchUpdate(index, entries[start:start+n], nil); err != nil {
			return fmt.Errorf("handing %s its entries: %w", refreshProgram, err)
		}
		done, err := prog.Run(&ebpf.RunOptions{Context: []uint64{uint64(n)}})
		if err != nil {
			return fmt.Errorf("running %s: %w", refreshProgram, err)
		}
		if done != uint32(n) {
			return fmt.Errorf("%s refreshed %d of %d entries", refreshProgram, done, n)
		}
		var cursor ebpf.MapBatchCursor // the lookup writes the same indexes back
		got, err := t.objs.RefreshBatch.BatchLookup(&cursor, index, s.refreshed[:n], nil)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("reading refreshed entries: %w", err)
		}
		for i, c := range s.refreshed[:got] {
			if c.Flags&(connsConnFlagsCONN_STALE|connsConnFlagsCONN_GONE) != 0 {
				// Not read now: the table has the counters of the last
				// state change, the last refresh maybe newer ones.
				if prev, ok := s.tcp[keys[start+i]]; ok {
					prev.newer(&c)
				}
			}
			if c.Flags&connsConnFlagsCONN_GONE != 0 {
				if err := t.ghost(keys[start+i], &c); err != nil {
					return err
				}
				continue
			}
			entries[start+i] = c
		}
	}
	return nil
}

// ghost takes an entry whose socket the refresh found gone: one destroyed
// since the table was read has left the table and its closed event has it;
// one still there lost its destruction, and is reported closed now.
func (t *Tracker) ghost(key uint64, c *connsConn) error {
	var still connsConn
	if err := t.objs.Conns.Lookup(&key, &still); errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("looking up an entry whose socket is gone: %w", err)
	}
	if err := t.objs.Conns.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("removing an entry whose socket is gone: %w", err)
	}
	c.State = tcpClose
	t.scratch.ghosts = append(t.scratch.ghosts, *c)
	return nil
}

// refreshEachNamespace runs conns_refresh_netns, where the kernel refused
// conns_refresh, in every namespace that has tracked sockets: those of the
// last snapshot's entries, and those the kernel reported new since
// (netns_new, which is emptied). A namespace that can no longer be found
// has no socket left to refresh; the handle of one that has no entry left
// is closed, so that it can go away.
func (t *Tracker) refreshEachNamespace() error {
	it := t.engine.Iterator(refreshNetnsProgram)
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
