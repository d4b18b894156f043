/* SPDX-License-Identifier: GPL-2.0 */
/*
 * UDP: one entry per (socket, local addr:port, remote addr:port) in `flows`.
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

	struct flow *f = bpf_map_lookup_elem(&flows, &k);
	if (!f) {
		struct flow fresh = { .cgroup_id = bpf_skb_cgroup_id(skb) };
		long err = bpf_map_update_elem(&flows, &k, &fresh, BPF_NOEXIST);
		if (err && err != -EEXIST) {
			count_drop(DROP_MAP_FULL);
			return;
		}
		f = bpf_map_lookup_elem(&flows, &k);
		if (!f)
			return;
	}
	if (!f->owner.pid) {
		struct owner *o = bpf_map_lookup_elem(&owners, &k.cookie);
		if (o)
			f->owner = *o;
	}
	if (ingress) {
		__sync_fetch_and_add(&f->bytes_in, payload);
		__sync_fetch_and_add(&f->packets_in, 1);
	} else {
		__sync_fetch_and_add(&f->bytes_out, payload);
		__sync_fetch_and_add(&f->packets_out, 1);
	}
	f->last_ns = bpf_ktime_get_ns();
}

#endif /* CONNS_UDP_H */
