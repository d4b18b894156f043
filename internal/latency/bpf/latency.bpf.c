// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * netstacklat: how long received packets have been inside the host network
 * stack when they reach each layer, aggregated into per-CPU log2 histograms
 * (ebpf_exporter exp2 semantics) in the kernel. Two backends implement the
 * hooks: fentry/fexit programs at netstacklat's own attachment points, and
 * netfilter + tp_btf programs for kernels that refuse fentry. Both feed the
 * same recording code, so filters and grouping mean the same on either.
 *
 * latency = realtime now - skb->tstamp, where skb->tstamp is the RX software
 * timestamp (CLOCK_REALTIME) taken at netif_receive_skb/netif_rx while user
 * space holds a socket with SOF_TIMESTAMPING_RX_SOFTWARE open.
 */
#include "record.h"
#include "slow.h"
#include "ingress.h"
#include "socket.h"
#include "at.h"
#include "nic.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* ---- nic: the NIC's stamp until the software stamp, on either backend ---- */

/* Attached only for nic: no hook_backends check. net:netif_receive_skb
 * fires in __netif_receive_skb_core, after the software stamp is taken
 * (net_timestamp_check) and before any protocol sees the packet, so it
 * sees every frame, PTP's own (not IP) too. */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(tp_nic, struct sk_buff *skb)
{
	if (sampled())
		record_nic(skb);
	return 0;
}

/* ---- netfilter: ip-start (PRE_ROUTING), tcp-start/udp-start (LOCAL_IN) ---- */

/* Attached only for ip-start on this backend: no hook_backends check. */
SEC("netfilter")
int nf_ip_start(struct bpf_nf_ctx *ctx)
{
	if (!sampled())
		return NF_ACCEPT;
	record_skb(HOOK_IP_START, ctx->skb, NULL);
	return NF_ACCEPT;
}


SEC("netfilter")
int nf_l4_start(struct bpf_nf_ctx *ctx)
{
	const struct nf_hook_state *state = ctx->state;
	struct sk_buff *skb = ctx->skb;
	__u32 hook;

	if (!sampled())
		return NF_ACCEPT;
	switch (l4_protocol(skb, state->pf)) {
	case IPPROTO_TCP:
		hook = HOOK_TCP_START;
		break;
	case IPPROTO_UDP:
		hook = HOOK_UDP_START;
		break;
	default:
		return NF_ACCEPT;
	}
	if (hook_enabled(hook))
		record_skb(hook, skb, NULL);
	return NF_ACCEPT;
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(tp_sk_data_ready, struct sock *sk)
{
	void *queue = __builtin_preserve_access_index(&sk->sk_receive_queue);
	struct sk_buff *tail = sk->sk_receive_queue.prev;
	__u16 proto = sk->sk_protocol;
	__u16 type = sk->sk_type;
	bool selected, take = sampled();

	/* A wakeup left out is still needed for UDP reads: the read FIFO
	 * must see every datagram, sampled or not. */
	if (!take && !hook_enabled(HOOK_UDP_SOCK_READ))
		return 0;
	if ((void *)tail == queue || !tail)
		return 0;
	/* Another namespace's socket (the default -n 0 selects ours) leaves
	 * before any map is touched — unless read wait, which takes every
	 * socket's reads, needs its UDP datagrams in the read FIFO. */
	selected = netns_allowed(sk_netns(sk));
	if (!selected && !read_wait)
		return 0;
	if (proto == IPPROTO_TCP && type == SOCK_STREAM && take && selected && hook_enabled(HOOK_TCP_SOCK_ENQUEUED))
		tcp_enqueued(sk, tail);
	else if (proto == IPPROTO_UDP && type == SOCK_DGRAM &&
		 ((take && selected && hook_enabled(HOOK_UDP_SOCK_ENQUEUED)) || hook_enabled(HOOK_UDP_SOCK_READ)))
		udp_enqueued(sk, tail, queue, take && selected);
	return 0;
}

/* ---- tcp-socket-read: skb_copy_datagram_iovec, then sock_recv_length ---- */

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(tp_skb_copy_datagram_iovec, struct sk_buff *skb, int len)
{
	struct pending_read *p;
	__u64 task;
	__u32 zero = 0;

	/* Attached only for tcp-socket-read: no hook_backends check. Any
	 * socket's copy is taken, and sock_recv_length, which has the socket,
	 * keeps only TCP reads of the namespaces in scope. Not skb->sk here:
	 * under load its line is one the reading CPU has not touched yet, and
	 * loading it showed as ~57 ns per copy in the run-time statistics,
	 * the rest of this program ~5 ns (the stamp's line, which tcp_recvmsg
	 * has read, costs nothing). Requests/s did not change without it: the
	 * kernel takes the miss when it unlinks the skb (docs/LATENCY.md). */
	p = bpf_map_lookup_elem(&tcp_reads, &zero);
	if (!p)
		return 0;
	task = bpf_get_current_task();
	if (p->task != task) {
		/* A read's first copy: whether it is recorded is decided
		 * here, before its stamp is read. */
		p->task = task;
		p->copied = 0;
		p->skip = !sampled();
	}
	if (p->skip)
		return 0;
	p->copied += len;
	/* The queue is in arrival order: the last skb copied is the newest,
	 * the one tcp_recv_timestamp reports. */
	read_stamp(skb, &p->s);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(tp_sock_recv_length, struct sock *sk, int ret, int flags)
{
	__u16 proto = sk->sk_protocol;
	bool errqueue = flags & MSG_ERRQUEUE;

	/* tcp_read ends the pending read whatever was read: the copies of
	 * an error-queue read, or another protocol's, were taken too. */
	if (hook_enabled(HOOK_TCP_SOCK_READ))
		tcp_read(sk, ret, proto == IPPROTO_TCP && !errqueue);
	if (errqueue)
		return 0;
	if (proto == IPPROTO_UDP && hook_enabled(HOOK_UDP_SOCK_READ) && !(flags & MSG_PEEK))
		udp_read(sk, ret);
	return 0;
}

/* ---- the start-up check behind tcp_read_clock (readclock.go) ---- */

/* The connection whose reads the check looks at: the ports of its reading
 * end, local and remote (in host order). Ports, not the task: a task's id in
 * a PID namespace is not the kernel's. */
volatile const __u16 read_clock_lport = 0;
volatile const __u16 read_clock_rport = 0;

/* What the check's program saw when that connection's last read returned. */
struct read_clock_sample {
	__u64 age;      /* ns since tcp_clock_cache's time */
	__u32 segs_out; /* the socket's segments sent so far, ACKs included */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct read_clock_sample);
} read_clock_samples SEC(".maps");

static __always_inline void read_clock_check(struct sock *sk)
{
	struct read_clock_sample *sample;
	struct tcp_sock *tp;
	__u32 zero = 0;

	if (sk->__sk_common.skc_num != read_clock_lport || sk->__sk_common.skc_dport != bpf_htons(read_clock_rport))
		return;
	tp = bpf_skc_to_tcp_sock(sk);
	sample = bpf_map_lookup_elem(&read_clock_samples, &zero);
	if (!tp || !sample)
		return;
	sample->age = bpf_ktime_get_ns() - tp->tcp_clock_cache;
	sample->segs_out = tp->segs_out;
}

/* A read that returns nothing (EAGAIN before the data is there) writes a
 * sample too: the one the check reads is the last read's, which returned. */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(tp_read_clock_check, struct sock *sk)
{
	read_clock_check(sk);
	return 0;
}

/* Where sock_recv_length is missing (before 6.4); the arguments after sk
 * changed in 5.19, and the check reads none of them. */
SEC("fexit/tcp_recvmsg")
int BPF_PROG(fexit_read_clock_check, struct sock *sk)
{
	read_clock_check(sk);
	return 0;
}

/* ---- fentry/fexit backend: netstacklat's attachment points ---- */

/* ip-start, tcp-start, udp-start: the skb entering IP, TCP or UDP. */
#define FENTRY_SKB(func, hook)                                                  \
	SEC("fentry/" #func)                                                    \
	int BPF_PROG(fentry_##func, struct sk_buff *skb)                        \
	{                                                                       \
		if (hook_on(hook, BACKEND_FENTRY) && sampled() &&                \
		    netns_allowed(skb_netns(skb)))                              \
			record_skb(hook, skb, NULL);                            \
		return 0;                                                       \
	}

FENTRY_SKB(ip_rcv_core, HOOK_IP_START)
FENTRY_SKB(ip6_rcv_core, HOOK_IP_START)
FENTRY_SKB(tcp_v4_rcv, HOOK_TCP_START)
FENTRY_SKB(tcp_v6_rcv, HOOK_TCP_START)
FENTRY_SKB(udp_rcv, HOOK_UDP_START)
FENTRY_SKB(udpv6_rcv, HOOK_UDP_START)

SEC("fexit/tcp_queue_rcv")
int BPF_PROG(fexit_tcp_queue_rcv, struct sock *sk, struct sk_buff *skb)
{
	if (hook_on(HOOK_TCP_SOCK_ENQUEUED, BACKEND_FENTRY) && sampled() && netns_allowed(sk_netns(sk)))
		record_skb(HOOK_TCP_SOCK_ENQUEUED, skb, sk);
	return 0;
}

SEC("fexit/__udp_enqueue_schedule_skb")
int BPF_PROG(fexit_udp_enqueue_schedule_skb, struct sock *sk, struct sk_buff *skb, int ret)
{
	/* non-zero: dropped (receive buffer full, memory pressure) */
	if (ret == 0 && hook_on(HOOK_UDP_SOCK_ENQUEUED, BACKEND_FENTRY) && sampled() &&
	    netns_allowed(sk_netns(sk)))
		record_skb(HOOK_UDP_SOCK_ENQUEUED, skb, sk);
	return 0;
}

/* tcp_recvmsg reports the newest RX stamp it copied (tss->ts[0]) here,
 * after the read, whenever one of the skbs read carried a stamp. */
SEC("fentry/tcp_recv_timestamp")
int BPF_PROG(fentry_tcp_recv_timestamp, void *msg, struct sock *sk, struct scm_timestamping_internal *tss)
{
	struct stamp s = {};

	if (!hook_on(HOOK_TCP_SOCK_READ, BACKEND_FENTRY) || !sampled())
		return 0;
	if (bpf_core_field_size(tss->ts) == 3 * sizeof(ktime_t)) {
		struct scm_timestamping_internal___ktime *ns = (void *)tss;

		s.tstamp = ns->ts[0];
	} else {
		s.tstamp = tss->ts[0].tv_sec * 1000000000LL + tss->ts[0].tv_nsec;
	}
	if (read_ifindex)
		s.ifindex = sk_rx_ifindex(sk);
	if (s.tstamp <= 0)
		s.skip = REASON_NO_STAMP;
	record_tcp_read(sk, &s);
	return 0;
}

/* udp_recvmsg/udpv6_recvmsg hand the datagram just read to skb_consume_udp. */
SEC("fentry/skb_consume_udp")
int BPF_PROG(fentry_skb_consume_udp, struct sock *sk, struct sk_buff *skb, int len)
{
	struct stamp s;

	/* MSG_PEEK passes the length negated: the datagram stays queued */
	if (len < 0 || !hook_on(HOOK_UDP_SOCK_READ, BACKEND_FENTRY) || !sampled())
		return 0;
	read_stamp(skb, &s);
	read_done(HOOK_UDP_SOCK_READ, sk, &s);
	return 0;
}

/* ---- --at: user-named points, retargeted at run time ---- */

/* Loaded once per --at tracepoint:CATEGORY:NAME, at NAME. */
SEC("tp_btf/netif_receive_skb")
int tp_at(__u64 *ctx)
{
	record_at(ctx);
	return 0;
}

/* Loaded once per --at fentry:FUNCTION, at FUNCTION. */
SEC("fentry/netif_receive_skb")
int fentry_at(__u64 *ctx)
{
	record_at(ctx);
	return 0;
}
