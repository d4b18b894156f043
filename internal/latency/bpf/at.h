/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * --at: probes the user names, at any tracepoint or kernel function that
 * takes an skb. One generic program per kind of point (tp_btf, fentry); the
 * attach engine loads it once per probe, retargeted at the point, with
 * constants of its own (attach.Program.Constants): the hook it records and
 * which of the point's arguments are the skb and a socket, which user
 * space found in the kernel's BTF.
 */
#ifndef LATENCY_AT_H
#define LATENCY_AT_H

#include "slow.h"

volatile const __u32 at_hook = N_HOOKS; /* this copy's hook: N_HOOKS and up */
volatile const __u32 at_skb_arg = 0;    /* which argument is the struct sk_buff * */
volatile const __s32 at_sock_arg = -1;  /* which is a struct sock *, or -1: none */

/* Tracing programs read at most this many arguments (MAX_BPF_FUNC_ARGS). */
#define AT_MAX_ARGS 12

/*
 * at_arg reads argument i of the point. A tracing program's context can be
 * read only at constant offsets ("dereference of modified ctx ptr"), hence
 * a load per offset, each in asm: as C, clang sinks the twelve loads into
 * one through a computed pointer. i is a constant of this copy (its .rodata
 * is frozen), so the verifier walks only the case it names and never reads
 * past the point's last argument in a case not taken.
 */
#define AT_ARG(i, off)                                                          \
	case i:                                                                 \
		asm volatile("%0 = *(u64 *)(%1 + " #off ")" : "=r"(v) : "r"(ctx)); \
		break;

static __always_inline void *at_arg(__u64 *ctx, __s32 i)
{
	void *v = NULL;

	switch (i) {
	AT_ARG(0, 0)
	AT_ARG(1, 8)
	AT_ARG(2, 16)
	AT_ARG(3, 24)
	AT_ARG(4, 32)
	AT_ARG(5, 40)
	AT_ARG(6, 48)
	AT_ARG(7, 56)
	AT_ARG(8, 64)
	AT_ARG(9, 72)
	AT_ARG(10, 80)
	AT_ARG(11, 88)
	}
	return v;
}

#define TCP_TIME_WAIT 6
#define TCP_NEW_SYN_RECV 12

/* A full socket, or NULL: early demux may hang a request or timewait
 * socket on an skb, which lacks the fields a full one has. */
static __always_inline const struct sock *full_sock(const struct sock *sk)
{
	__u8 state;

	if (!sk)
		return NULL;
	state = sk->__sk_common.skc_state;
	return state == TCP_TIME_WAIT || state == TCP_NEW_SYN_RECV ? NULL : sk;
}

/*
 * record_at records the skb a point was given. The namespace (-n, -I -n -1)
 * and --slow's connection come from the point's socket argument if it has
 * one. Else the namespace is the skb's device's while the skb has one, and
 * skb->sk is used only where it has not: once a socket took the skb, TCP
 * and UDP reuse skb->dev (UDP for its scratch) and the loads through it,
 * fault-safe, read 0. skb->sk is then the receiver's; before IP it may
 * still be the sender's (over a veth: skb_scrub_packet keeps it, until
 * ip_rcv_core orphans the skb), which must not name the connection.
 */
static __always_inline void record_at(__u64 *ctx)
{
	struct sk_buff *skb = at_arg(ctx, at_skb_arg);
	const struct sock *sk = NULL;
	__u32 inum = 0;
	struct stamp s;

	if (!skb || !sampled())
		return;
	if (at_sock_arg >= 0) {
		sk = at_arg(ctx, at_sock_arg);
		if (netns_inum && sk)
			inum = sk_netns(sk);
	} else if (netns_inum || group_by_netns || slow_ns) {
		inum = skb_netns(skb);
		if (!inum) {
			sk = full_sock(skb->sk);
			if (sk)
				inum = sk_netns(sk);
		}
	}
	if (!netns_allowed(inum))
		return;
	read_stamp(skb, &s);
	/* skb_iif is set in __netif_receive_skb_core: before it (netif_rx,
	 * netif_receive_skb, napi_gro_receive_entry) the skb is on its device. */
	if (read_ifindex && !s.ifindex)
		s.ifindex = skb->dev->ifindex;
	if (ifindex_allowed(s.ifindex))
		report_slow(at_hook, record(at_hook, &s, 0, sk, skb, false), &s, sk, skb, false);
}

#endif /* LATENCY_AT_H */
