/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * UDP: one entry per (socket, local addr:port, remote addr:port) in `flows`,
 * counted per datagram: by fentry/fexit programs on the UDP functions where
 * the kernel allows them (they run for UDP only), else by cgroup_skb
 * programs on the cgroup v2 root, which see every packet of every socket.
 */
#ifndef CONNS_UDP_H
#define CONNS_UDP_H

#include "conns.h"

/* parse_udp fills the flow key's addresses and ports from the packet (which
 * starts at the network header in cgroup_skb) and returns the UDP payload
 * length, or -1 for anything that is not a first-fragment UDP datagram. */
static __always_inline int parse_udp(struct __sk_buff *skb, struct flow_key *k, bool ingress)
{
	u32 l4;
	u8 *src, *dst;
	struct {
		u8 ver_ihl, tos;
		u16 len, id, frag;
		u8 ttl, proto;
		u16 csum;
		u8 saddr[4], daddr[4];
	} ip4;
	struct {
		u32 ver_flow;
		u16 len;
		u8 nexthdr, hop;
		u8 saddr[16], daddr[16];
	} ip6;
	struct {
		u16 sport, dport, len, csum;
	} udp;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, 0, &ip4, sizeof(ip4)))
			return -1;
		if (ip4.proto != IPPROTO_UDP || (bpf_ntohs(ip4.frag) & 0x1fff))
			return -1;
		l4 = (ip4.ver_ihl & 0xf) * 4;
		k->family = AF_INET;
		src = ip4.saddr;
		dst = ip4.daddr;
		__builtin_memcpy(ingress ? k->raddr : k->laddr, src, 4);
		__builtin_memcpy(ingress ? k->laddr : k->raddr, dst, 4);
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, 0, &ip6, sizeof(ip6)))
			return -1;
		if (ip6.nexthdr != IPPROTO_UDP) /* extension headers: not followed */
			return -1;
		l4 = sizeof(ip6);
		k->family = AF_INET6;
		__builtin_memcpy(ingress ? k->raddr : k->laddr, ip6.saddr, 16);
		__builtin_memcpy(ingress ? k->laddr : k->raddr, ip6.daddr, 16);
	} else {
		return -1;
	}
	if (bpf_skb_load_bytes(skb, l4, &udp, sizeof(udp)))
		return -1;
	k->lport = bpf_ntohs(ingress ? udp.dport : udp.sport);
	k->rport = bpf_ntohs(ingress ? udp.sport : udp.dport);
	int payload = (int)bpf_ntohs(udp.len) - (int)sizeof(udp);
	return payload < 0 ? -1 : payload;
}

/* maybe_udp decides from the IP header's protocol byte alone, by direct
 * packet access, so that the TCP packets every cgroup_skb program sees too
 * cost a few instructions: no helper call, no map. */
static __always_inline bool maybe_udp(struct __sk_buff *skb)
{
	u8 *ip = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;

	if (skb->protocol == bpf_htons(ETH_P_IP))
		return (void *)(ip + 10) > end || ip[9] == IPPROTO_UDP; /* short: the full parse decides */
	if (skb->protocol == bpf_htons(ETH_P_IPV6))
		return (void *)(ip + 7) > end || ip[6] == IPPROTO_UDP;
	return false;
}

/* udp_account adds one datagram (or a GSO batch of packets) to its flow,
 * making the flow with the socket's cgroup if it has none yet. */
static __always_inline void udp_account(struct flow_key *k, u64 cgroup_id, u64 payload, u64 packets, bool ingress)
{
	struct flow *f = bpf_map_lookup_elem(&flows, k);
	struct owner *o;

	if (!f) {
		/* A new flow goes in whole, this datagram counted: user space
		 * reads the table while programs run (on other CPUs, or on 7.x
		 * while one is preempted), and would take a flow without its
		 * time of last datagram for one idle since boot, report it
		 * closed with nothing and delete it under this program. */
		struct flow fresh = { .cgroup_id = cgroup_id, .last_ns = bpf_ktime_get_ns() };
		o = bpf_map_lookup_elem(&owners, &k->cookie);
		if (o)
			fresh.owner = *o;
		if (ingress) {
			fresh.bytes_in = payload;
			fresh.packets_in = packets;
		} else {
			fresh.bytes_out = payload;
			fresh.packets_out = packets;
		}
		long err = bpf_map_update_elem(&flows, k, &fresh, BPF_NOEXIST);
		if (err != -EEXIST) { /* in, or the table is full */
			if (err)
				count_drop(DROP_MAP_FULL);
			return;
		}
		f = bpf_map_lookup_elem(&flows, k); /* another CPU made it first */
		if (!f)
			return;
	}
	if (!f->owner.pid) {
		o = bpf_map_lookup_elem(&owners, &k->cookie);
		if (o)
			f->owner = *o;
	}
	if (ingress) {
		__sync_fetch_and_add(&f->bytes_in, payload);
		__sync_fetch_and_add(&f->packets_in, packets);
	} else {
		__sync_fetch_and_add(&f->bytes_out, payload);
		__sync_fetch_and_add(&f->packets_out, packets);
	}
	f->last_ns = bpf_ktime_get_ns();
}

/* udp_packet: a packet at cgroup_skb ingress or egress, for any socket. */
static __always_inline void udp_packet(struct __sk_buff *skb, bool ingress)
{
	if (!maybe_udp(skb))
		return;
	struct bpf_sock *sk = skb->sk;
	if (!sk)
		return;
	sk = bpf_sk_fullsock(sk);
	if (!sk || sk->type != SOCK_DGRAM || sk->protocol != IPPROTO_UDP)
		return;
	struct flow_key k = {};
	int payload = parse_udp(skb, &k, ingress);
	if (payload < 0)
		return;
	k.cookie = bpf_get_socket_cookie(skb);
	/* A UDP GSO batch on its way out, or a UDP GRO skb on its way in
	 * (sockets with UDP_GRO), is several datagrams. */
	udp_account(&k, bpf_skb_cgroup_id(skb), payload, skb->gso_segs ?: 1, ingress);
}

/* ---- the fentry/fexit path: programs that run for UDP only ---- */

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
union flowi_uli {
	struct {
		__be16 dport;
		__be16 sport;
	} ports;
};

struct flowi4 {
	__be32 saddr;
	__be32 daddr;
	union flowi_uli uli;
};

struct flowi6 {
	struct in6_addr daddr;
	struct in6_addr saddr;
	union flowi_uli uli;
};

struct inet_cork {
	u16 gso_size;
};

/* Since 5.15 (before, the cgroup pointer was packed into a u64 `val`). */
struct sock_cgroup_data___ptr {
	struct cgroup *cgroup;
};
#pragma clang attribute pop

/* udp_sock_of returns a traced function's socket if it is a UDP socket. */
static __always_inline struct sock *udp_sock_of(struct sock *sk)
{
	return sk && sk->sk_protocol == IPPROTO_UDP && sk->sk_type == SOCK_DGRAM ? sk : NULL;
}

/* udp_cookie is the socket's cookie, which its cgroup/sock_create program
 * made (or the start-up listing, for sockets older than stacktop). */
static __always_inline u64 udp_cookie(struct sock *sk)
{
	if (tracing_cookie)
		return bpf_get_socket_cookie(sk);
	return sk->__sk_common.skc_cookie.counter;
}

/* sock_cgroup_id is the cgroup v2 id of the socket's cgroup, where the
 * kernel keeps it as a pointer; 0 (unknown) before 5.15. */
static __always_inline u64 sock_cgroup_id(struct sock *sk)
{
	struct sock_cgroup_data___ptr *d = (void *)&sk->sk_cgrp_data;

	if (!bpf_core_field_exists(d->cgroup))
		return 0;
	return BPF_CORE_READ(d, cgroup, kn, id);
}

/* udp_sent: a datagram leaving through udp_send_skb()/udp_v6_send_skb(),
 * its UDP header not written yet; k has its addresses and ports. With UDP
 * GSO (UDP_SEGMENT) the skb carries gso_size-byte datagrams. */
static __always_inline void udp_sent(struct sk_buff *skb, struct flow_key *k, const struct inet_cork *cork)
{
	struct sock *sk = udp_sock_of(skb->sk);
	if (!sk)
		return;
	u32 offset = skb->transport_header - (u32)(skb->data - skb->head);
	u64 payload = skb->len - offset - 8; /* past the UDP header */
	u16 gso = cork->gso_size;
	u64 packets = gso ? (payload + gso - 1) / gso : 1;

	k->cookie = udp_cookie(sk);
	udp_account(k, sock_cgroup_id(sk), payload, packets, false);
}

/* skb_datagrams is how many datagrams an skb queued to a socket holds:
 * more than one only for a UDP GRO skb (sockets with UDP_GRO). */
static __always_inline u64 skb_datagrams(struct sk_buff *skb)
{
	struct skb_shared_info *shinfo = (void *)(skb->head + skb->end);
	u16 segs = BPF_CORE_READ(shinfo, gso_segs);

	return segs ?: 1;
}

/* skb_udp_key fills the flow key of a datagram being queued to sk (its
 * headers in place, data past the UDP header) and returns its payload
 * length as the UDP header gives it (a GRO skb's: all of its datagrams'),
 * or -1. */
static __always_inline int skb_udp_key(struct sock *sk, struct sk_buff *skb, struct flow_key *k)
{
	unsigned char *head = skb->head;
	u16 l3 = skb->network_header, l4 = skb->transport_header;
	struct {
		u16 sport, dport, len, csum;
	} udp;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		k->family = AF_INET;
		bpf_probe_read_kernel(k->raddr, 4, head + l3 + 12);
		bpf_probe_read_kernel(k->laddr, 4, head + l3 + 16);
	} else {
		k->family = AF_INET6;
		bpf_probe_read_kernel(k->raddr, 16, head + l3 + 8);
		bpf_probe_read_kernel(k->laddr, 16, head + l3 + 24);
	}
	if (bpf_probe_read_kernel(&udp, sizeof(udp), head + l4))
		return -1;
	k->lport = bpf_ntohs(udp.dport);
	k->rport = bpf_ntohs(udp.sport);
	k->cookie = udp_cookie(sk);
	int payload = (int)bpf_ntohs(udp.len) - (int)sizeof(udp);
	return payload < 0 ? -1 : payload;
}

/* udp_dropped moves a datagram that was counted received and that
 * __udp_enqueue_schedule_skb() then refused (receive buffer full: the
 * kernel's UdpRcvbufErrors; or socket memory: UdpMemErrors) from the
 * flow's received datagrams to its drops. */
static __always_inline void udp_dropped(struct sock *sk, struct sk_buff *skb)
{
	struct flow_key k = {};
	int payload = skb_udp_key(sk, skb, &k);
	if (payload < 0)
		return;
	struct flow *f = bpf_map_lookup_elem(&flows, &k);
	if (!f)
		return;
	u64 datagrams = skb_datagrams(skb);

	__sync_fetch_and_add(&f->bytes_in, -(u64)payload);
	__sync_fetch_and_add(&f->packets_in, -datagrams);
	__sync_fetch_and_add(&f->drops_in, datagrams);
}

#endif /* CONNS_UDP_H */
