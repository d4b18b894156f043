/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * stacktop's own small CO-RE header: only the kernel types and fields our
 * programs read, marked preserve_access_index so libbpf/cilium relocate each
 * access against the running kernel's BTF. Field order and padding here do
 * not matter; names and types do.
 */
#ifndef STACKTOP_H
#define STACKTOP_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s32 s32;
typedef __s64 s64;
typedef __s64 ktime_t;
typedef _Bool bool;
#define true 1
#define false 0

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define NF_ACCEPT 1
#define NFPROTO_IPV4 2
#define NFPROTO_IPV6 10
#define SOCK_STREAM 1
#define SOCK_DGRAM 2
#define MSG_PEEK 2
#define MSG_ERRQUEUE 0x2000
#define EEXIST 17

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct list_head {
	struct list_head *next, *prev;
};

struct ns_common {
	unsigned int inum;
};

struct net {
	struct ns_common ns;
};

typedef struct {
	struct net *net;
} possible_net_t;

typedef struct {
	s64 counter;
} atomic64_t;

struct net_device {
	int ifindex;
	char name[16];
	possible_net_t nd_net;
};

struct in6_addr {
	union {
		__u8 u6_addr8[16];
		__be32 u6_addr32[4];
	} in6_u;
};

struct sock_common {
	union {
		struct {
			__be32 skc_daddr;
			__be32 skc_rcv_saddr;
		};
	};
	union {
		struct {
			__be16 skc_dport;
			__u16 skc_num;
		};
	};
	unsigned int skc_hash; /* established-table hash of the 4-tuple */
	unsigned short skc_family;
	volatile unsigned char skc_state;
	int skc_bound_dev_if;
	possible_net_t skc_net;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
	atomic64_t skc_cookie; /* 0 until sock_gen_cookie() first runs */
};

struct sk_buff;

struct sk_buff_head {
	struct sk_buff *next;
	struct sk_buff *prev;
	__u32 qlen;
};

struct sock_cgroup_data {
	struct cgroup *cgroup;
};

struct sock {
	struct sock_common __sk_common;
	struct sk_buff_head sk_receive_queue;
	int sk_rcvbuf;
	u16 sk_protocol;
	u16 sk_type;
	struct sock_cgroup_data sk_cgrp_data;
	struct {
		struct sk_buff *head;
		struct sk_buff *tail;
	} sk_backlog;
	int sk_rx_dst_ifindex;
};

/* Before 5.17 the cached receive interface lived in inet_sock. */
struct inet_sock {
	struct sock sk;
	int rx_dst_ifindex;
};

struct kernfs_node {
	u64 id;
};

struct cgroup {
	struct kernfs_node *kn;
};

struct rb_node {
	struct rb_node *rb_left;
};

struct rb_root {
	struct rb_node *rb_node;
};

struct inet_connection_sock {
	struct sock icsk_inet;
};

struct tcp_sock {
	u32 srtt_us;
	u32 mdev_us;
	u32 segs_in;
	u32 segs_out;
	u32 data_segs_in;
	u32 data_segs_out;
	u64 bytes_received;
	u64 bytes_acked;
	u64 bytes_sent;
	u64 bytes_retrans;
	u32 total_retrans;
	u32 rcv_nxt;
	u32 copied_seq;
	u32 snd_una;
	u32 snd_nxt;
	u32 mss_cache;
	u32 rcv_wup;
	u32 rcv_wnd;
	u32 rcv_ooopack;
	u64 tcp_clock_cache; /* CLOCK_MONOTONIC ns of the socket's last tcp_mstamp_refresh() */
	struct rb_root out_of_order_queue;
	struct sk_buff *ooo_last_skb;
};

struct tcp_skb_cb {
	__u32 seq;
	__u32 end_seq;
};

struct udp_sock {
	struct sk_buff_head reader_queue;
};

/* The NIC's receive stamp: raw PHC time as the driver read it, 0 when it
 * stamped nothing. 6.x has it in a union with netdev_data (a driver's
 * cookie for ndo_get_tstamp); CO-RE finds it through the anonymous union. */
struct skb_shared_hwtstamps {
	ktime_t hwtstamp;
};

/* What follows an skb's data, at head + end. */
struct skb_shared_info {
	u8 nr_frags;
	unsigned short gso_segs; /* packets in a GSO/GRO skb; 0 or 1: one */
	struct skb_shared_hwtstamps hwtstamps;
};

struct sk_buff {
	union {
		struct {
			struct sk_buff *next;
			struct sk_buff *prev;
			union {
				struct net_device *dev;
				unsigned long dev_scratch;
			};
		};
	};
	struct sock *sk;
	union {
		ktime_t tstamp;
		u64 skb_mstamp_ns;
	};
	char cb[48];
	unsigned int len;
	unsigned int data_len;
	__u8 tstamp_type : 2;      /* 6.11+: SKB_CLOCK_REALTIME=0, MONOTONIC=1, TAI=2 */
	__u8 mono_delivery_time : 1; /* 5.18 - 6.10 */
	int skb_iif;
	__be16 protocol;
	__u16 transport_header;
	__u16 network_header;
	__u16 mac_header;
	unsigned char *head;
	unsigned char *data;
	unsigned int end; /* offset of skb_shared_info from head (64-bit) */
};

struct nf_hook_state {
	u8 hook;
	u8 pf;
	struct net_device *in;
	struct net_device *out;
	struct sock *sk;
	struct net *net;
};

struct bpf_nf_ctx {
	const struct nf_hook_state *state;
	struct sk_buff *skb;
};

struct timespec64 {
	s64 tv_sec;
	long tv_nsec;
};

/* ts[0]: the software RX stamp of the newest skb a TCP read copied. */
struct scm_timestamping_internal {
	struct timespec64 ts[3];
};

/* The same since 7.x: nanoseconds instead of timespec64. */
struct scm_timestamping_internal___ktime {
	ktime_t ts[3];
};

struct task_struct {
	int pid;
	int tgid;
	char comm[16];
};

#pragma clang attribute pop

/*
 * sock_identity tells a socket from another that reuses its memory: before
 * 5.12 tracing programs have no socket cookie and key TCP sockets by their
 * address, so a key alone may name a freed socket's entry. It is the hash
 * of the socket's connection (for TCP, the 4-tuple hashed with a secret,
 * set when connect() or the handshake hashes it; for UDP, its port and
 * address hashes) and its remote port: unlike the local port, both are
 * still there after TCP_CLOSE, where reads may still come. Two sockets
 * share it only by chance.
 */
static __always_inline u32 sock_identity(const struct sock_common *c)
{
	return c->skc_hash ^ (u32)c->skc_dport << 16;
}

#endif /* STACKTOP_H */
