// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// ownerPasses is how many refreshes look for an accepted socket's process
// before it keeps its listener's owner: one finds almost every socket (a
// server accepts within microseconds of the handshake); the others catch
// a socket that waited in the accept queue over a refresh. A socket no
// process holds (accepted by the kernel itself, as nfsd does) must not make
// every refresh walk every open file of the host.
const ownerPasses = 3

// ownAccepted gives the accepted sockets in entries, which still have
// their listener's owner, the owner of the process that holds them: it runs
// conns_owners (an iterator over every task's open files, which sets the
// owner in the kernel's entries) when one of them was looked for at fewer
// than ownerPasses refreshes, and reads their entries again.
func (t *Tracker) ownAccepted(cookies []uint64, entries []connsConn) error {
	it := t.engine.Iterator(ownersProgram)
	if it == nil {
		return nil
	}
	s := &t.scratch
	if s.ownerPasses == nil {
		s.ownerPasses = map[uint64]ownerSearch{}
	}
	s.unowned = s.unowned[:0]
	for i := range entries {
		if entries[i].Flags&(connsConnFlagsCONN_OWNED|connsConnFlagsCONN_PARTIAL|connsConnFlagsCONN_ACTIVE) != 0 {
			continue
		}
		search := s.ownerPasses[cookies[i]]
		search.refresh = s.refresh
		if search.passes < ownerPasses {
			search.passes++
			s.unowned = append(s.unowned, i)
		}
		s.ownerPasses[cookies[i]] = search
	}
	for cookie, search := range s.ownerPasses {
		if search.refresh != s.refresh {
			delete(s.ownerPasses, cookie)
		}
	}
	if len(s.unowned) == 0 {
		return nil
	}
	if err := readIterator(it); err != nil {
		return fmt.Errorf("finding the owners of accepted sockets: %w", err)
	}
	for _, i := range s.unowned {
		// The owner only: the counters read are the table's, older than
		// the refreshed ones.
		var fresh connsConn
		err := t.objs.Conns.Lookup(&cookies[i], &fresh)
		if errors.Is(err, ebpf.ErrKeyNotExist) { // closed meanwhile: its closed event has it
			continue
		}
		if err != nil {
			return fmt.Errorf("reading an accepted socket's owner: %w", err)
		}
		entries[i].Owner, entries[i].Flags = fresh.Owner, entries[i].Flags|fresh.Flags&connsConnFlagsCONN_OWNED
	}
	return nil
}

// ownerSearch is how many refreshes looked for an accepted socket's
// process, and the last refresh that saw the socket without one.
type ownerSearch struct {
	passes  uint8
	refresh uint64
}

// ownPreexisting gives the sockets that existed before start-up the owner
// the kernel knows: conns_owners sets the process that holds each, in the
// adopted entry of a TCP socket, in the owners map for a UDP one. /proc
// tells only where stacktop may read every process's descriptors (root):
// a service that runs as another user with CAP_BPF, CAP_PERFMON and
// CAP_NET_ADMIN may not, and the iterator needs no more. Without it (before
// 5.11, or refused), or for a TCP socket without an entry (the table was
// full), /proc is all.
func (t *Tracker) ownPreexisting() error {
	it := t.engine.Iterator(ownersProgram)
	if it == nil {
		return nil
	}
	if err := readIterator(it); err != nil {
		return fmt.Errorf("finding the owners of sockets open at start-up: %w", err)
	}
	for cookie, p := range t.preexisting {
		var c connsConn
		if p.rec.PID != 0 || t.objs.Conns.Lookup(&cookie, &c) != nil || c.Owner.Pid == 0 {
			continue // closed meanwhile, or not adopted: its owner stays unknown
		}
		p.rec.PID, p.rec.Comm, p.rec.Cgroup = c.Owner.Pid, t.scratch.comm(c.Owner.Comm), t.cgroups.Path(c.Owner.CgroupId)
	}
	return nil
}
