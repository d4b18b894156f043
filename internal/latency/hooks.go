// Package latency implements netstacklat: in-kernel log2 histograms of how long
// received packets have been inside the host network stack when they reach each
// layer, with one backend chosen per hook (features.Choose) so the same hooks
// can later be served by fentry programs where the kernel allows them.
package latency

//go:generate go tool bpf2go -target bpfel -type hist_key -type hist_value -type slow_event latency ../../bpf/latency.bpf.c

import (
	"fmt"
	"strings"
)

// Hook is one measuring point; its value is the hook id used by the BPF program.
type Hook uint16

// The hooks in stack order, as netstacklat names them.
const (
	IPStart Hook = iota
	TCPStart
	UDPStart
	TCPSocketEnqueued
	UDPSocketEnqueued
	TCPSocketRead
	UDPSocketRead
	numHooks
)

// Hooks lists every hook in stack order.
var Hooks = []Hook{IPStart, TCPStart, UDPStart, TCPSocketEnqueued, UDPSocketEnqueued, TCPSocketRead, UDPSocketRead}

var hookInfo = [numHooks]struct{ name, desc string }{
	{"ip-start", "packet has reached the IP layer, i.e. past traffic control"},
	{"tcp-start", "packet has reached the local TCP layer, i.e. past IP (routing, netfilter)"},
	{"udp-start", "packet has reached the local UDP layer, i.e. past IP (routing, netfilter)"},
	{"tcp-socket-enqueued", "packet has been enqueued to a TCP socket, i.e. end of the kernel receive stack"},
	{"udp-socket-enqueued", "packet has been enqueued to a UDP socket, i.e. end of the kernel receive stack"},
	{"tcp-socket-read", "packet payload has been read from a TCP socket, i.e. delivered to user space"},
	{"udp-socket-read", "packet payload has been read from a UDP socket, i.e. delivered to user space"},
}

func (h Hook) String() string {
	if h >= numHooks {
		return fmt.Sprintf("hook(%d)", h)
	}
	return hookInfo[h].name
}

// Description says what a sample at this hook means.
func (h Hook) Description() string { return hookInfo[h].desc }

// ParseHook returns the hook with the given netstacklat name.
func ParseHook(name string) (Hook, error) {
	for _, h := range Hooks {
		if h.String() == name {
			return h, nil
		}
	}
	names := make([]string, len(Hooks))
	for i, h := range Hooks {
		names[i] = h.String()
	}
	return 0, fmt.Errorf("unknown probe (known: %s)", strings.Join(names, ", "))
}

// HookSet is a set of hooks, a bit per hook.
type HookSet uint32

// NetfilterHooks are the hooks whose tracepoint backend is a netfilter link:
// attaching one needs CAP_NET_ADMIN, and CAP_SYS_ADMIN to enter another
// network namespace.
const NetfilterHooks HookSet = 1<<IPStart | 1<<TCPStart | 1<<UDPStart

// AllHooks contains every hook.
const AllHooks HookSet = 1<<numHooks - 1

// Has reports whether h is in the set.
func (s HookSet) Has(h Hook) bool { return s&(1<<h) != 0 }

// With returns the set with h added.
func (s HookSet) With(h Hook) HookSet { return s | 1<<h }

// Without returns the set with h removed.
func (s HookSet) Without(h Hook) HookSet { return s &^ (1 << h) }
