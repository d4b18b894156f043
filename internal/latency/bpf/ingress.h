/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Packets on their way in: ip-start, tcp/udp-start and the enqueued hooks.
 */
#ifndef LATENCY_INGRESS_H
#define LATENCY_INGRESS_H

#include "slow.h"

/*
 * Hooks that see an skb on its way in: ip-start, tcp/udp-start, enqueued.
 * The caller has applied the namespace filter (netfilter programs need
 * none: their links exist only in the namespaces in scope).
 */
static __always_inline void record_skb(__u32 hook, struct sk_buff *skb, const struct sock *sk)
{
	struct stamp s;

	read_stamp(skb, &s);
	if (ifindex_allowed(s.ifindex))
		report_slow(hook, record(hook, &s, 0, NULL, skb, false), &s, sk, skb, false);
}

struct iphdr {
	__u8 protocol;
} __attribute__((preserve_access_index));

struct ipv6hdr {
	__u8 nexthdr;
} __attribute__((preserve_access_index));

/*
 * The verifier turns this kfunc into a plain move: loads through its result
 * are fault-safe direct loads, where bpf_probe_read_kernel is a helper call
 * (~20 ns per packet here). 6.2+; netfilter programs need 6.4 anyway.
 */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

/* l4_protocol returns the transport protocol of an IPv4/IPv6 packet at LOCAL_IN. */
static __always_inline __u8 l4_protocol(struct sk_buff *skb, __u8 pf)
{
	unsigned char *nh = skb->head + skb->network_header;
	struct ipv6hdr *ip6;
	struct iphdr *ip;
	__u8 proto, ext[2];
	__u32 off;

	if (pf == NFPROTO_IPV4) {
		ip = bpf_rdonly_cast(nh, bpf_core_type_id_kernel(struct iphdr));
		return ip->protocol;
	}
	ip6 = bpf_rdonly_cast(nh, bpf_core_type_id_kernel(struct ipv6hdr));
	proto = ip6->nexthdr;
	off = 40;
	/* Extension headers are parsed after LOCAL_IN; skip the common ones. */
	for (int i = 0; i < 4; i++) {
		if (proto != IPV6_HOPOPTS && proto != IPV6_ROUTING && proto != IPV6_DSTOPTS &&
		    proto != IPV6_FRAGMENT)
			break;
		if (bpf_probe_read_kernel(ext, 2, nh + off))
			return 0;
		off += proto == IPV6_FRAGMENT ? 8 : (ext[1] + 1) * 8;
		proto = ext[0];
	}
	return proto;
}

#endif /* LATENCY_INGRESS_H */
