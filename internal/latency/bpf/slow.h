/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * --slow: one event per packet over the threshold.
 */
#ifndef LATENCY_SLOW_H
#define LATENCY_SLOW_H

#include "record.h"


/*
 * --slow: each packet whose latency at a hook exceeds slow_ns is reported on
 * its own through slow_events. At 0 (no --slow) the verifier knows the
 * constant and removes the code it guards: what stays is one load of it and
 * a branch never taken per sample.
 */
volatile const __u64 slow_ns = 0;
volatile const __u32 slow_limit = 0; /* events per second, 0: no limit */

/*
 * One packet slower than slow_ns at a hook. Addresses and ports are this
 * host's end (local) and the peer's (remote), IPv4 in the first 4 bytes.
 * pid, comm and cgroup are the reading task's, at the socket-read hooks only.
 */
struct slow_event {
	__s64 ts;      /* CLOCK_REALTIME ns when the hook saw the packet */
	__u64 latency; /* ns */
	__u64 cgroup;
	__u8 local_addr[16];
	__u8 remote_addr[16];
	__u32 netns;
	__u32 ifindex;
	__u32 pid;
	__u16 local_port;
	__u16 remote_port;
	__u16 hook;
	__u8 family; /* AF_INET, AF_INET6; 0: the addresses are unknown */
	__u8 proto;  /* IPPROTO_*; 0: unknown */
	char comm[COMM_LEN];
	/* The latency the same skb showed at each earlier hook, ns; 0 where
	 * it is not known (see slow_trails). */
	__u64 earlier[N_HOOKS];
};

/* Never read: puts struct slow_event in the object's BTF for bpf2go -type. */
const struct slow_event *const slow_event_type = NULL;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096); /* resized by user space */
} slow_events SEC(".maps");

/*
 * --slow: the latency each packet showed at the hooks before the socket
 * reads, so that an event can say where the packet waited. A direct-mapped
 * table (an array indexed by a hash of the skb's stamp, each slot the skb's
 * address and stamp, which identify it, and one latency per hook), not a
 * hash map: every packet writes it at every hook while --slow is on, and a
 * map update costs a lock and an allocation (an LRU hash made
 * tp_sk_data_ready 1,100 ns a run instead of 145, docs/LATENCY.md); a slot
 * is one cache line. A newer packet hashed to the same slot replaces the
 * older one, whose trail is then unknown. Sized by user space: trail_mask + 1
 * slots, 0 (no trail) without --slow.
 */
#define TRAIL_HOOKS HOOK_TCP_SOCK_READ /* the hooks before the reads */

struct trail {
	__u64 skb;
	__s64 tstamp;
	__u64 lat[TRAIL_HOOKS]; /* ns at each hook; 0: not seen there */
};

volatile const __u32 trail_mask = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct trail);
} slow_trails SEC(".maps");

/* trail_slot is the slot of the packet s describes (it may hold another
 * packet's trail); NULL when the hook does not know the skb (fentry
 * tcp_recv_timestamp). */
static __always_inline struct trail *trail_slot(const struct stamp *s)
{
	__u64 h = (__u64)s->tstamp;
	__u32 idx;

	if (!s->skb)
		return NULL;
	h ^= h >> 29;
	h *= 0x9e3779b97f4a7c15ULL;
	idx = (h >> 32) & trail_mask;
	return bpf_map_lookup_elem(&slow_trails, &idx);
}

static __always_inline bool trail_of_packet(const struct trail *t, const struct stamp *s)
{
	return t->skb == s->skb && t->tstamp == s->tstamp;
}

/* trail_note keeps the latency of the packet s at hook. */
static __always_inline void trail_note(__u32 hook, const struct stamp *s, __s64 lat)
{
	struct trail *t;

	if (hook >= TRAIL_HOOKS)
		return;
	t = trail_slot(s);
	if (!t)
		return;
	if (!trail_of_packet(t, s)) {
		__builtin_memset(t->lat, 0, sizeof(t->lat));
		t->skb = s->skb;
		t->tstamp = s->tstamp;
	}
	t->lat[hook] = lat;
}

/* trail_copy puts the packet's latencies at the hooks before hook into e,
 * those no greater than lat: two CPUs writing one slot for two packets at
 * once may leave one's latency under the other's key. */
static __always_inline void trail_copy(struct slow_event *e, __u32 hook, const struct stamp *s, __s64 lat)
{
	struct trail *t = trail_slot(s);

	if (!t || !trail_of_packet(t, s))
		return;
	for (__u32 h = 0; h < TRAIL_HOOKS; h++)
		if (h < hook && t->lat[h] <= (__u64)lat)
			e->earlier[h] = t->lat[h];
}

/* Why a slow packet was not reported: every one is counted. */
enum slow_drop {
	SLOW_RING_FULL, /* user space did not keep up */
	SLOW_LIMITED,   /* over slow_limit in this second */
	N_SLOW_DROPS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_SLOW_DROPS);
	__type(key, __u32);
	__type(value, __u64);
} slow_drops SEC(".maps");

/* The events sent in the current second, shared by every CPU (slow_limit). */
struct slow_budget {
	__u64 second;
	__u64 sent;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct slow_budget);
} slow_budgets SEC(".maps");

static __always_inline void count_slow_drop(__u32 why)
{
	__u64 *v = bpf_map_lookup_elem(&slow_drops, &why);

	if (v)
		(*v)++;
}

/*
 * slow_budget_left takes one of this second's slow_limit events. CPUs race
 * only at the limit: each may send one more than the budget (an atomic
 * fetch-and-add would need 5.12), and a second's first events may reset the
 * count twice.
 */
static __always_inline bool slow_budget_left(__s64 now)
{
	__u64 second = (__u64)now / 1000000000ULL;
	struct slow_budget *b;
	__u32 zero = 0;

	if (!slow_limit)
		return true;
	b = bpf_map_lookup_elem(&slow_budgets, &zero);
	if (!b)
		return false;
	if (b->second != second) {
		b->second = second;
		b->sent = 0;
	}
	if (b->sent >= slow_limit)
		return false;
	__sync_fetch_and_add(&b->sent, 1);
	return true;
}

/* The socket's addresses: the connection's, or only the local end of an
 * unconnected UDP socket. */
static __always_inline void sock_tuple(struct slow_event *e, const struct sock *sk)
{
	const struct sock_common *c = &sk->__sk_common;

	e->proto = sk->sk_protocol;
	e->local_port = c->skc_num;
	e->remote_port = bpf_ntohs(c->skc_dport);
	if (c->skc_family == AF_INET) {
		e->family = AF_INET;
		*(__be32 *)e->local_addr = c->skc_rcv_saddr;
		*(__be32 *)e->remote_addr = c->skc_daddr;
	} else if (c->skc_family == AF_INET6) {
		e->family = AF_INET6;
		bpf_probe_read_kernel(e->local_addr, 16, __builtin_preserve_access_index(&c->skc_v6_rcv_saddr));
		bpf_probe_read_kernel(e->remote_addr, 16, __builtin_preserve_access_index(&c->skc_v6_daddr));
	}
}

/* The headers as they are on the wire, not kernel types: no relocation. */
struct ipv4_header {
	__u8 version_ihl;
	__u8 tos;
	__be16 len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__be16 check;
	__be32 saddr;
	__be32 daddr;
};

struct ipv6_header {
	__be32 version_flow;
	__be16 len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* skb->tail: the end of the linear data, an offset from head on 64-bit. */
struct sk_buff___tail {
	unsigned int tail;
} __attribute__((preserve_access_index));

#define IPV4_FRAG_OFFSET 0x1fff

/*
 * The addresses and ports of a received packet, from its headers; the
 * ports only when the transport header is in the linear data already (at
 * ip-start it may not be) and the packet is not a later fragment.
 */
static __always_inline void skb_tuple(struct slow_event *e, struct sk_buff *skb)
{
	__u32 nh_off = skb->network_header;
	__u16 mac_off = skb->mac_header;
	__u32 end = ((struct sk_buff___tail *)skb)->tail;
	unsigned char *nh = skb->head + nh_off;
	struct ipv4_header ip;
	struct ipv6_header ip6;
	__u16 ports[2];
	__u8 version, ext[2];
	__u32 off;

	/* Not set yet: a NIC's skb before __netif_receive_skb_core (an --at
	 * probe at netif_receive_skb) has its MAC header set, not this one. */
	if (mac_off != (__u16)~0U && nh_off < mac_off)
		return;
	if (bpf_probe_read_kernel(&version, 1, nh))
		return;
	version >>= 4;
	if (version == 4) {
		if (bpf_probe_read_kernel(&ip, sizeof(ip), nh))
			return;
		e->family = AF_INET;
		e->proto = ip.protocol;
		*(__be32 *)e->local_addr = ip.daddr;
		*(__be32 *)e->remote_addr = ip.saddr;
		if (ip.frag_off & bpf_htons(IPV4_FRAG_OFFSET))
			return;
		off = (ip.version_ihl & 0xf) * 4;
	} else if (version == 6) {
		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), nh))
			return;
		e->family = AF_INET6;
		__builtin_memcpy(e->local_addr, ip6.daddr, 16);
		__builtin_memcpy(e->remote_addr, ip6.saddr, 16);
		e->proto = ip6.nexthdr;
		off = sizeof(ip6);
		/* As l4_protocol; a fragment header ends the walk, without ports. */
		for (int i = 0; i < 3; i++) {
			if (e->proto != IPV6_HOPOPTS && e->proto != IPV6_ROUTING && e->proto != IPV6_DSTOPTS)
				break;
			if (bpf_probe_read_kernel(ext, 2, nh + off))
				return;
			off += (ext[1] + 1) * 8;
			e->proto = ext[0];
		}
	} else {
		return;
	}
	if (e->proto != IPPROTO_TCP && e->proto != IPPROTO_UDP)
		return;
	if (nh_off + off + sizeof(ports) > end || bpf_probe_read_kernel(ports, sizeof(ports), nh + off))
		return;
	e->remote_port = bpf_ntohs(ports[0]);
	e->local_port = bpf_ntohs(ports[1]);
}

/*
 * report_slow sends an event when a sample's latency exceeds --slow. sk is
 * the socket at socket hooks, skb the packet at hooks that have it: the
 * socket names the connection, the packet the peer of an unconnected UDP
 * socket. in_task: the hook runs in the reading task (socket reads).
 */
static __always_inline void report_slow(__u32 hook, __s64 lat, const struct stamp *s, const struct sock *sk,
					struct sk_buff *skb, bool in_task)
{
	struct slow_event *e;

	if (!slow_ns || lat < 0)
		return;
	trail_note(hook, s, lat);
	if (lat <= (__s64)slow_ns)
		return;
	if (!slow_budget_left(s->tstamp + lat)) {
		count_slow_drop(SLOW_LIMITED);
		return;
	}
	e = bpf_ringbuf_reserve(&slow_events, sizeof(*e), 0);
	if (!e) {
		count_slow_drop(SLOW_RING_FULL);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = s->tstamp + lat;
	e->latency = lat;
	e->hook = hook;
	e->ifindex = s->ifindex;
	if (sk && (sk->__sk_common.skc_dport || !skb))
		sock_tuple(e, sk);
	else if (skb)
		skb_tuple(e, skb);
	if (sk)
		e->netns = sk_netns(sk);
	else if (skb)
		e->netns = skb_netns(skb);
	if (in_task) {
		e->pid = bpf_get_current_pid_tgid() >> 32;
		e->cgroup = bpf_get_current_cgroup_id();
		bpf_get_current_comm(e->comm, sizeof(e->comm));
	}
	/* Hooks are in stack order: the earlier ones have lower ids. */
	trail_copy(e, hook, s, lat);
	bpf_ringbuf_submit(e, 0);
}

#endif /* LATENCY_SLOW_H */
