// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/bench/internal/bpfobj"
	"github.com/stacktop/stacktop/internal/attach"
	"github.com/stacktop/stacktop/internal/cgroup"
)

// `bench empty -hooks SET,...` holds a program that does nothing at each
// hook of the named sets until it is interrupted: the floor tools
// (empty-read, empty-latency, empty-stream-tcp, empty-stream, empty-serve)
// run it, so that the
// overhead table shows, next to a stacktop tool, what its program runs
// cost on this machine when the programs return at once — the dispatch,
// which no program of ours can take back. A target the floor tool misses
// cannot be met with those hooks here.

// emptyHook is one hook a stacktop tool attaches to on the tracepoint
// backend, with what an empty program there returns.
type emptyHook struct {
	name       string
	typ        ebpf.ProgramType
	attachType ebpf.AttachType
	result     int32 // 1: cgroup_skb's "allow", netfilter's NF_ACCEPT
	attach     func(*ebpf.Program) ([]link.Link, error)
}

// emptySets are the hook sets by name, as the tools attach them (see
// docs/LATENCY.md and docs/CONNECTIONS.md for which program runs where).
var emptySets = map[string][]emptyHook{
	// tcp-socket-read: two runs per read.
	"read": {rawTracepoint("skb_copy_datagram_iovec"), rawTracepoint("sock_recv_length")},
	// tcp/udp-socket-enqueued: one run per socket wakeup.
	"enqueue": {rawTracepoint("sk_data_ready")},
	// ip-start and tcp/udp-start: one run each per packet received.
	"netfilter": {
		netfilter("PRE_ROUTING", link.NetfilterInetPreRouting, attach.NetfilterFirst),
		netfilter("LOCAL_IN", link.NetfilterInetLocalIn, attach.NetfilterLast),
	},
	// The connection table: two runs per TCP state change, two per
	// socket destroyed (each a program and its spare).
	"conns": {
		rawTracepoint("inet_sock_set_state"), rawTracepoint("inet_sock_set_state"),
		rawTracepoint("tcp_destroy_sock"), rawTracepoint("tcp_destroy_sock"),
	},
	// stream's UDP accounting where fentry is refused: every packet, and
	// every socket created.
	"udp": {
		cgroupHook(ebpf.CGroupSKB, ebpf.AttachCGroupInetIngress), cgroupHook(ebpf.CGroupSKB, ebpf.AttachCGroupInetEgress),
		cgroupHook(ebpf.CGroupSock, ebpf.AttachCGroupInetSockCreate),
	},
}

func rawTracepoint(name string) emptyHook {
	return emptyHook{name: "raw_tp/" + name, typ: ebpf.RawTracepoint, attach: func(p *ebpf.Program) ([]link.Link, error) {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: p})
		return []link.Link{l}, err
	}}
}

func netfilter(name string, hook link.NetfilterInetHook, priority int32) emptyHook {
	return emptyHook{name: "netfilter/" + name, typ: ebpf.Netfilter, attachType: ebpf.AttachNetfilter, result: 1, attach: func(p *ebpf.Program) ([]link.Link, error) {
		var links []link.Link
		for _, pf := range []link.NetfilterProtocolFamily{link.NetfilterProtoIPv4, link.NetfilterProtoIPv6} {
			l, err := link.AttachNetfilter(link.NetfilterOptions{Program: p, ProtocolFamily: pf, Hook: hook, Priority: priority})
			if err != nil {
				return links, err
			}
			links = append(links, l)
		}
		return links, nil
	}}
}

// cgroupHook is a cgroup program on the cgroup v2 root; its empty program
// returns 1: cgroup_skb's "allow", cgroup/sock_create's too.
func cgroupHook(typ ebpf.ProgramType, at ebpf.AttachType) emptyHook {
	return emptyHook{name: "cgroup/" + at.String(), typ: typ, attachType: at, result: 1, attach: func(p *ebpf.Program) ([]link.Link, error) {
		root, err := cgroup.Root()
		if err != nil {
			return nil, err
		}
		l, err := link.AttachCgroup(link.CgroupOptions{Path: root, Attach: at, Program: p})
		return []link.Link{l}, err
	}}
}

func emptyMain(ctx context.Context, args []string) error {
	known := strings.Join(slices.Sorted(maps.Keys(emptySets)), ", ")
	fs := flag.NewFlagSet("empty", flag.ContinueOnError)
	sets := fs.String("hooks", "", "hook sets: "+known)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("empty takes no arguments, not %q", fs.Args())}
	}
	var hooks []emptyHook
	for name := range strings.SplitSeq(*sets, ",") {
		set, ok := emptySets[name]
		if !ok {
			return usageError{fmt.Errorf("-hooks: no hook set %q (known: %s)", name, known)}
		}
		hooks = append(hooks, set...)
	}
	if unix.Geteuid() != 0 {
		return errNotRoot
	}
	var links []link.Link
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	for _, h := range hooks {
		prog, err := bpfobj.LoadEmpty(h.typ, h.attachType, h.result)
		if err != nil {
			return fmt.Errorf("%s: %w", h.name, err)
		}
		l, err := h.attach(prog)
		prog.Close() // the links hold it
		links = append(links, slices.DeleteFunc(l, func(l link.Link) bool { return l == nil })...)
		if err != nil {
			return fmt.Errorf("attaching an empty program at %s: %w", h.name, err)
		}
	}
	fmt.Println("ready") // the harness's sign that every program is attached
	<-ctx.Done()         // SIGINT or SIGTERM
	return nil
}
