/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The socket hooks: what a socket remembers between its enqueue and its
 * read, and the filters netstacklat applies at the socket-read hooks.
 */
#ifndef LATENCY_SOCKET_H
#define LATENCY_SOCKET_H

#include "slow.h"
#include "readwait.h"


/*
 * tcp-socket-read: the newest stamp a recvmsg copied, kept per CPU until the
 * same task's sock_recv_length on that CPU takes it. Per CPU rather than in
 * task storage, which cost ~55 ns more per copied skb here: the read is lost only
 * when its task is preempted in between by another reader on that CPU, or
 * migrates (see docs/LATENCY.md). copied adds up the bytes of the task's
 * copies since its last read returned: a read that returned as many bytes
 * is the one they belong to (a copy outside any recvmsg, such as a tun
 * device's read, is not mistaken for the next read's).
 */
struct pending_read {
	__u64 task; /* address, only compared */
	__u64 copied;
	struct stamp s;
	bool skip; /* --sample left this read out */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pending_read);
} tcp_reads SEC(".maps");

struct tcp_state {
	__u32 ooo_seen;             /* rcv_ooopack when last looked at */
	__u32 ooo_end;              /* reads below this sequence may be HOL blocked */
	__u32 ooo_active;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tcp_state);
} tcp_states SEC(".maps");

/*
 * tcp_states for kernels whose tracing programs cannot use sk_storage: keyed
 * by the socket's address and ports, so a socket reusing a freed one's memory
 * starts afresh. Sized 1 by user space when sk_storage is usable.
 */
struct sock_key {
	__u64 sk;
	__u16 dport;
	__u16 num;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sock_key);
	__type(value, struct tcp_state);
} tcp_states_by_sock SEC(".maps");

/*
 * tcp-socket-enqueued: the receive-queue tail each socket last recorded, so
 * a sk_data_ready without new data (urgent data, SO_RCVLOWAT) is not counted
 * twice. A direct-mapped cache indexed by the socket's hash rather than
 * sk_storage: under load each socket's entry is a cold cache line, and
 * sk_storage touches three (the sock's storage pointer, the storage, the
 * element), which made up most of tp_sk_data_ready's run time. Two sockets
 * sharing a slot only weaken the dedup: a wakeup without new data right
 * after the other socket's enqueue is recorded again. An entry is the skb
 * and its stamp, which only one socket's queue holds; 16 bytes, so no entry
 * straddles two cache lines (with the socket too, 24 bytes, a quarter did).
 */
#define ENQUEUED_SLOTS_LOG2 12

struct enqueued_tail {
	__u64 skb;
	__s64 tstamp;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << ENQUEUED_SLOTS_LOG2);
	__type(key, __u32);
	__type(value, struct enqueued_tail);
} tcp_enqueued_tails SEC(".maps");

/*
 * udp-socket-read has no tracepoint that sees the datagram being read, so each
 * UDP socket keeps a FIFO of the datagrams enqueued (seen at sk_data_ready) and
 * a read pops, up to the datagram now at the head of the socket's queues, the
 * ones it consumed.
 */
#define FIFO_LEN 64
#define WALK_BACK 8 /* new skbs looked for behind the tail per sk_data_ready */

struct udp_fifo {
	struct stamp ring[FIFO_LEN];
	struct stamp newest; /* newest skb seen at sk_data_ready, pushed or not */
	__u32 head;          /* free-running; entry i is ring[i % FIFO_LEN] */
	__u32 tail;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct udp_fifo);
} udp_fifos SEC(".maps");

/* ---- socket-read filters (applied where netstacklat applies them) ---- */

static __always_inline __u32 socket_queue_len(const struct sock *sk, bool udp)
{
	__u32 n = sk->sk_receive_queue.qlen;

	/* udp_sock's fields lie past struct sock, beyond what the verifier
	 * lets a sock pointer load: read them with a probe. */
	if (udp)
		n += BPF_CORE_READ((struct udp_sock *)sk, reader_queue.qlen);
	return n;
}

static __always_inline bool queue_long_enough(const struct sock *sk, bool udp)
{
	if (!min_queue_len || socket_queue_len(sk, udp) >= min_queue_len)
		return true;
	/* The backlog's length is in bytes, not skbs: any backlog passes. */
	return sk->sk_backlog.tail != NULL;
}

/*
 * read_selected applies the socket-read filters (-q, -p, -c, -i, -n) and
 * gives the reading task's cgroup when it is needed. Applied before
 * anything costlier: a read the filters exclude (another namespace's, with
 * the default -n 0) should cost next to nothing.
 */
static __always_inline bool read_selected(__u32 hook, const struct sock *sk, const struct stamp *s, __u64 *cgroup)
{
	if (!ifindex_allowed(s->ifindex) || !netns_allowed(sk_netns(sk)))
		return false;
	if (!queue_long_enough(sk, hook == HOOK_UDP_SOCK_READ))
		return false;
	if (filter_pid) {
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;

		if (!bpf_map_lookup_elem(&pid_filter, &tgid))
			return false;
	}
	*cgroup = 0;
	if (filter_cgroup || group_by_cgroup)
		*cgroup = bpf_get_current_cgroup_id();
	return !filter_cgroup || bpf_map_lookup_elem(&cgroup_filter, cgroup);
}

/* record_read records a selected read, in the reading task's context, and
 * with read wait adds it to its socket's histogram. */
static __always_inline void record_read(__u32 hook, struct sock *sk, const struct stamp *s, __u64 cgroup)
{
	__s64 lat = record(hook, s, cgroup, sk, NULL, true);

	if (read_wait && lat >= 0)
		read_wait_add(hook, sk, lat);
	report_slow(hook, lat, s, sk, NULL, true);
}

/*
 * read_wait_unselected adds a read the filters excluded to its socket's
 * read wait: read wait takes every read the probe could take, filtered or
 * not, since the filters select the latency histograms and the connections
 * are selected in user space. Off, the verifier removes it.
 */
static __always_inline void read_wait_unselected(__u32 hook, struct sock *sk, const struct stamp *s)
{
	__s64 lat;

	if (read_wait && !s->skip && (lat = read_now(hook, sk) - s->tstamp) >= 0)
		read_wait_add(hook, sk, lat);
}

/* read_done takes a socket read of hook (udp-socket-read: the TCP one has
 * the head-of-line check first, record_tcp_read). */
static __always_inline void read_done(__u32 hook, struct sock *sk, const struct stamp *s)
{
	__u64 cgroup;

	if (read_selected(hook, sk, s, &cgroup))
		record_read(hook, sk, s, cgroup);
	else
		read_wait_unselected(hook, sk, s);
}

/* ---- sk_data_ready: tcp/udp-socket-enqueued, and the UDP read FIFO ---- */

static __always_inline bool same_skb(const struct stamp *a, const struct stamp *b)
{
	return a->skb == b->skb && a->tstamp == b->tstamp;
}

static __always_inline struct tcp_state *tcp_state_of(struct sock *sk)
{
	struct tcp_state *st, fresh = {};
	struct sock_key key = {};

	if (sk_storage_in_tracing)
		return bpf_sk_storage_get(&tcp_states, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	key.sk = (__u64)sk;
	key.dport = sk->__sk_common.skc_dport;
	key.num = sk->__sk_common.skc_num;
	st = bpf_map_lookup_elem(&tcp_states_by_sock, &key);
	if (st)
		return st;
	bpf_map_update_elem(&tcp_states_by_sock, &key, &fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&tcp_states_by_sock, &key);
}

static __always_inline void tcp_enqueued(struct sock *sk, struct sk_buff *tail)
{
	/* The established-table hash of the 4-tuple: already random, and on a
	 * line the receive path has just read (the verifier refuses hashing
	 * the address itself). */
	__u32 slot = sk->__sk_common.skc_hash & ((1 << ENQUEUED_SLOTS_LOG2) - 1);
	struct enqueued_tail *last = bpf_map_lookup_elem(&tcp_enqueued_tails, &slot);
	struct stamp s;

	if (!last)
		return;
	read_stamp(tail, &s);
	/* sk_data_ready also fires without new data (urgent data, wakeups);
	 * a coalesced tail carries the newest segment's stamp. */
	if (last->skb == s.skb && last->tstamp == s.tstamp)
		return;
	last->skb = s.skb;
	last->tstamp = s.tstamp;
	if (ifindex_allowed(s.ifindex))
		report_slow(HOOK_TCP_SOCK_ENQUEUED, record(HOOK_TCP_SOCK_ENQUEUED, &s, 0, sk, NULL, false), &s, sk, NULL, false);
}

static __always_inline void fifo_push(struct udp_fifo *f, const struct stamp *s)
{
	__u32 tail = f->tail;

	if (tail - f->head >= FIFO_LEN) {
		count(HOOK_UDP_SOCK_READ, REASON_FIFO_FULL);
		return;
	}
	f->ring[tail % FIFO_LEN] = *s;
	barrier();
	f->tail = tail + 1;
}

/* udp_enqueued records udp-socket-enqueued for a socket of a selected
 * namespace (selected), and fills the read FIFO for udp-socket-read. */
static __always_inline void udp_enqueued(struct sock *sk, struct sk_buff *tail, void *sentinel, bool selected)
{
	/* A reader splices sk_receive_queue onto reader_queue while this
	 * walks without the queue's lock: the oldest skb's prev then points at
	 * reader_queue's head, which is no skb either. */
	void *reader_queue = __builtin_preserve_access_index(&((struct udp_sock *)sk)->reader_queue);
	struct sk_buff *skb = tail;
	struct stamp fresh[WALK_BACK];
	struct udp_fifo *f;
	int n = 0;

	f = bpf_sk_storage_get(&udp_fifos, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!f)
		return;
	/* One sk_data_ready may follow several enqueues (6.18 batches UDP
	 * enqueues per NUMA node), so look behind the tail for every skb newer
	 * than the newest one already seen. */
	for (int i = 0; i < WALK_BACK; i++) {
		if ((void *)skb == sentinel || (void *)skb == reader_queue || !skb)
			break;
		read_stamp(skb, &fresh[i]);
		if (same_skb(&fresh[i], &f->newest))
			break;
		n++;
		skb = skb->prev;
	}
	if (n == 0)
		return;
	f->newest = fresh[0];
	for (int i = WALK_BACK - 1; i >= 0; i--) {
		if (i >= n)
			continue;
		if (selected && hook_enabled(HOOK_UDP_SOCK_ENQUEUED) && ifindex_allowed(fresh[i].ifindex))
			report_slow(HOOK_UDP_SOCK_ENQUEUED, record(HOOK_UDP_SOCK_ENQUEUED, &fresh[i], 0, sk, NULL, false),
				    &fresh[i], sk, NULL, false);
		if (hook_enabled(HOOK_UDP_SOCK_READ))
			fifo_push(f, &fresh[i]);
	}
}


/* before(a, b) for sequence numbers, as in include/net/tcp.h. */
static __always_inline bool seq_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

/* Highest sequence number an out-of-order segment received so far can end at. */
static __always_inline __u32 ooo_high_water(struct tcp_sock *tp)
{
	__u32 rcv_nxt = tp->rcv_nxt;
	__u32 wnd_end = tp->rcv_wup + tp->rcv_wnd;
	struct tcp_skb_cb *cb;
	__u32 end;

	if (seq_before(wnd_end, rcv_nxt))
		wnd_end = rcv_nxt;
	if (!tp->out_of_order_queue.rb_node)
		return rcv_nxt; /* everything out of order has been merged */
	/* TCP_SKB_CB(): the control block lives in skb->cb */
	cb = (void *)tp->ooo_last_skb + bpf_core_field_offset(struct sk_buff, cb);
	end = BPF_CORE_READ(cb, end_seq);
	/* a racy read may see garbage: never trust it beyond the window */
	if (end == 0 || seq_before(wnd_end, end))
		return wnd_end;
	return end;
}

/*
 * A read may have waited for a missing segment (head-of-line blocking) when
 * out-of-order segments arrived since the last look, or when it reads below
 * the highest sequence number those could cover. Such reads measure the
 * network's loss recovery, not the host, so they are excluded unless -y.
 */
static __always_inline bool tcp_maybe_hol_blocked(struct tcp_sock *tp)
{
	__u32 ooo = tp->rcv_ooopack;
	struct tcp_state *st;

	if (ooo == 0)
		return false;
	st = tcp_state_of((struct sock *)tp);
	if (!st)
		return true;
	if (ooo != st->ooo_seen) {
		st->ooo_seen = ooo;
		st->ooo_end = ooo_high_water(tp);
		st->ooo_active = 1;
		return true;
	}
	if (!st->ooo_active)
		return false;
	if (seq_before(st->ooo_end, tp->copied_seq)) {
		st->ooo_active = 0;
		return false;
	}
	return true;
}

/* A TCP read that returned data; s is the newest stamp it copied. The
 * head-of-line check reads a tcp_sock line no read touches otherwise
 * (rcv_ooopack, among the retransmission fields), so it comes after the
 * filters; a read they exclude is checked only for read wait, which
 * leaves head-of-line blocked reads out too. */
static __always_inline void record_tcp_read(struct sock *sk, const struct stamp *s)
{
	struct tcp_sock *tp;
	__u64 cgroup;
	bool selected = read_selected(HOOK_TCP_SOCK_READ, sk, s, &cgroup);

	if (!selected && !read_wait)
		return;
	/* The head-of-line check and read_now load tcp_sock fields, past
	 * struct sock: through the helper's result, which the verifier lets
	 * them load from (a cast of sk would stop at struct sock). One call
	 * for both, so from here the socket is tp. */
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return;
	if (!include_hol_blocked && tcp_maybe_hol_blocked(tp)) {
		if (selected)
			count(HOOK_TCP_SOCK_READ, REASON_HOL_BLOCKED);
		return;
	}
	if (selected)
		record_read(HOOK_TCP_SOCK_READ, (struct sock *)tp, s, cgroup);
	else
		read_wait_unselected(HOOK_TCP_SOCK_READ, (struct sock *)tp, s);
}

/* tcp_read ends the task's pending read, and records it when it was a
 * TCP read whose copies returned all its bytes. */
static __always_inline void tcp_read(struct sock *sk, int ret, bool tcp)
{
	struct pending_read *p;
	struct stamp s;
	__u32 zero = 0;

	p = bpf_map_lookup_elem(&tcp_reads, &zero);
	if (!p || p->task != bpf_get_current_task())
		return;
	p->task = 0;
	if (p->skip || !tcp || ret <= 0 || p->copied != (__u64)ret)
		return;
	s = p->s;
	record_tcp_read(sk, &s);
}

/* ---- udp-socket-read: pop the FIFO up to the datagram now at the head ---- */

/* q may lie past struct sock (udp_sock's reader_queue): read with a probe. */
static __always_inline struct sk_buff *queue_head(struct sk_buff_head *q)
{
	struct sk_buff *skb = BPF_CORE_READ(q, next);

	return (void *)skb == (void *)q ? NULL : skb;
}

static __always_inline void udp_read(struct sock *sk, int ret)
{
	struct udp_sock *up = (struct udp_sock *)sk;
	struct sk_buff *head;
	struct udp_fifo *f;
	struct stamp h = {}, s;
	__u32 consumed, first;

	f = bpf_sk_storage_get(&udp_fifos, sk, NULL, 0);
	if (!f) {
		/* No FIFO: no sk_data_ready of this socket has run since we
		 * attached — the datagram read arrived before, or its
		 * sk_data_ready comes after the read (6.18 runs it after a
		 * batch of enqueues, which a reader on another CPU may empty
		 * first). Counted as a read that raced its datagram, like
		 * one that finds the FIFO empty, where sk_data_ready would
		 * have made a FIFO (selected namespaces, or all with read
		 * wait). */
		if (ret >= 0 && (read_wait || netns_allowed(sk_netns(sk))))
			count(HOOK_UDP_SOCK_READ, REASON_READ_UNTRACKED);
		return;
	}
	/* recvmsg takes from reader_queue, refilled from sk_receive_queue. */
	head = queue_head(__builtin_preserve_access_index(&up->reader_queue));
	if (!head)
		head = queue_head(__builtin_preserve_access_index(&sk->sk_receive_queue));
	/* same_skb compares only these two; head came from a probe, so
	 * it is read with one too. */
	if (head) {
		h.skb = (__u64)head;
		h.tstamp = BPF_CORE_READ(head, tstamp);
	}

	first = f->head;
	consumed = f->tail - first;
	for (__u32 i = 0; i < FIFO_LEN; i++) {
		if (i >= consumed)
			break;
		if (head && same_skb(&f->ring[(first + i) % FIFO_LEN], &h)) {
			consumed = i;
			break;
		}
	}
	if (consumed == 0) {
		if (ret >= 0)
			count(HOOK_UDP_SOCK_READ, REASON_READ_UNTRACKED);
		return;
	}
	s = f->ring[(first + consumed - 1) % FIFO_LEN];
	f->head = first + consumed;
	/* Sampled after the FIFO is popped, which every read must do. */
	if (ret >= 0 && sampled())
		read_done(HOOK_UDP_SOCK_READ, sk, &s);
}


/* The interface the socket's packets arrive on, cached by early demux. */
static __always_inline __u32 sk_rx_ifindex(struct sock *sk)
{
	if (bpf_core_field_exists(sk->sk_rx_dst_ifindex))
		return sk->sk_rx_dst_ifindex;
	return BPF_CORE_READ((struct inet_sock *)sk, rx_dst_ifindex);
}

#endif /* LATENCY_SOCKET_H */
