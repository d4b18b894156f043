// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"github.com/stacktop/stacktop/internal/selector"
)

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
