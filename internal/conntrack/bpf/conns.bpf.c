// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Connection tracking for `stacktop top/stream`.
 *
 * TCP: one entry per socket in `conns`, keyed by the socket cookie. The
 * lifecycle comes from tp_btf/inet_sock_set_state. No program runs on the
 * data path: bytes, segments, smoothed RTT and retransmits are the kernel's
 * own tcp_sock counters, read by conns_refresh (a raw_tp program attached
 * nowhere: user space runs it with BPF_PROG_TEST_RUN once per refresh over
 * the entries it read from `conns`) and at every state change, a last time at TCP_CLOSE, whose final entry goes to the
 * ring buffer before the entry is deleted. Bytes are what the application wrote and read, derived
 * from sequence space (see tcp_bytes()).
 *
 * The socket-side programs read kernel memory directly (BTF pointers: a
 * load each, no helper call): a state change or a close then costs about
 * what its map operations cost. The refresh reads a copy (see
 * refresh_entry()).
 *
 * UDP: one entry per (socket, local addr:port, remote addr:port) in `flows`,
 * updated per datagram, so unconnected sockets are split by peer: by
 * fentry/fexit programs on udp_send_skb, udp_v6_send_skb and
 * __udp_enqueue_schedule_skb where the kernel allows them (they never run
 * for TCP), else by cgroup_skb ingress/egress on the cgroup v2 root, which
 * see every packet with its socket.
 *
 * Owners (pid, comm, cgroup, netns) are taken only in process context and
 * kept with the socket: connect() and listen() (state changes in the
 * caller), the process holding the file for accepted sockets
 * (conns_owners, an iterator over open files), socket() for UDP sockets
 * (cgroup/sock_create, into the `owners` LRU map that the softirq-side
 * cgroup_skb programs read). The current task in softirq is
 * whoever was interrupted and is never used.
 */
#include "conns.h"
#include "tcp.h"
#include "accept.h"
#include "udp.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(conns_tcp_state, struct sock *sk, int oldstate, int newstate)
{
	struct state_ran *slot = own_slot();
	const struct tcp_sock *tp = tracked_change(oldstate, newstate) ? tcp_of(sk) : NULL;

	if (tp && tcp_state_change(sk, tp, tcp_key(sk), oldstate, newstate))
		note_ran(slot, sk, state_mark(oldstate, newstate));
	else
		mark_change(sk, oldstate, newstate);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(conns_tcp_state_spare, struct sock *sk, int oldstate, int newstate)
{
	bool tracked = tracked_change(oldstate, newstate);

	if (tracked && first_ran(sk, state_mark(oldstate, newstate)))
		return 0;
	const struct tcp_sock *tp = tracked ? tcp_of(sk) : NULL;
	u64 cookie = tp ? tcp_key(sk) : 0;
	struct conn *c = tp ? bpf_map_lookup_elem(&conns, &cookie) : NULL;

	if (c ? c->state == newstate : marked(sk, oldstate, newstate))
		return 0; /* conns_tcp_state ran for it */
	if (tp)
		tcp_state_change(sk, tp, cookie, oldstate, newstate);
	count_drop(DROP_COVERED);
	return 0;
}

/* The same pair for the destruction: an entry still there when the spare
 * runs is one whose conns_tcp_destroy run the kernel skipped. */
SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(conns_tcp_destroy, struct sock *sk)
{
	struct state_ran *slot = own_slot();

	tcp_destroyed(sk);
	note_ran(slot, sk, CHANGE_DESTROY);
	return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(conns_tcp_destroy_spare, struct sock *sk)
{
	if (!first_ran(sk, CHANGE_DESTROY) && tcp_destroyed(sk))
		count_drop(DROP_COVERED);
	return 0;
}

/*
 * conns_refresh refreshes the entries user space put into refresh_batch
 * from their sockets, in place (refresh_entry), so that every refresh shows
 * the counters live, also while the owner sleeps in a syscall or does
 * nothing. User space runs it (a test run: it is attached nowhere) with the
 * entries it has just read from the table, REFRESH_BATCH at a time, so that
 * no run holds its CPU for long however many entries there are: its one
 * argument is how many entries the batch has (0: nothing to do), and it
 * returns how many it did.
 */
struct bpf_map;

struct refresh_count {
	u32 size;
	u32 done;
};

/* refresh_one refreshes the entry at index of refresh_batch (a
 * bpf_for_each_map_elem callback). */
static long refresh_one(struct bpf_map *map, const u32 *index, struct conn *c, struct refresh_count *count)
{
	if (*index >= count->size)
		return 1;
	refresh_entry(c);
	count->done++;
	return 0;
}

SEC("raw_tp")
int conns_refresh(u64 *ctx)
{
	struct refresh_count count = { .size = ctx[0] };

	if (count.size)
		bpf_for_each_map_elem(&refresh_batch, refresh_one, &count, 0);
	return count.done;
}

/*
 * conns_refresh_netns is conns_refresh where the kernel has no
 * bpf_for_each_map_elem (before 5.13): an iterator over the TCP sockets of
 * one network namespace (the one of the task that opens it), which user
 * space reads in every namespace with tracked sockets, and which refreshes
 * the entries in the table (refresh_found). A socket that reached TCP_CLOSE
 * is no longer in the tables it walks.
 */
SEC("iter/tcp")
int conns_refresh_netns(struct bpf_iter__tcp *ctx)
{
	const struct tcp_sock *tp = tcp_socket(ctx->sk_common);
	if (!tp)
		return 0;
	struct sock *sk = (void *)tp;
	u64 key = tcp_key(sk);
	struct conn *c = bpf_map_lookup_elem(&conns, &key);
	if (c)
		refresh_found(c, sk);
	return 0;
}

/*
 * conns_adopt is conns_refresh for start-up: every full socket that has no
 * entry yet gets a partial one, so that connections that existed before
 * stacktop are refreshed like the others.
 */
SEC("iter/tcp")
int conns_adopt(struct bpf_iter__tcp *ctx)
{
	const struct tcp_sock *tp = tcp_socket(ctx->sk_common);
	if (!tp)
		return 0;
	struct sock *sk = (void *)tp;
	struct conn fresh = {};
	tcp_new(&fresh, tp, tcp_key(sk), CONN_PARTIAL, sk->__sk_common.skc_state);
	tcp_insert(&fresh, BPF_NOEXIST); /* a state change was first: it knows better */
	return 0;
}
/*
 * conns_owners gives accepted sockets the owner of the process that holds
 * them (a pre-forked worker, not the listener's creator): an iterator over
 * every task's open files, which user space runs at a refresh that shows
 * accepted sockets still without an owner of their own. It replaced the
 * accept syscalls' exit tracepoints, which with any program attached send
 * every syscall of every task on the host through the slow path (about 50
 * ns each here). The file table is the process's, not the accepting
 * thread's: comm is the process's (its main thread's), as at a close
 * (set_process_owner). A socket held by several processes (forked after
 * accept) takes the first one met, the lowest pid. Start-up runs it once
 * for the sockets that existed before: TCP ones adopted into the table and
 * UDP ones, which no cgroup/sock_create saw, get their holder as owner
 * without /proc (which another user's processes keep from a service that
 * runs with the capabilities the BPF programs need and no more).
 */
SEC("iter/task_file")
int conns_owners(struct bpf_iter__task_file *ctx)
{
	struct task_struct___conns *task = (void *)ctx->task;
	struct file *file = ctx->file;

	if (!task || !file)
		return 0;
	struct sock *sk = file_sock(file);
	if (!sk)
		return 0;
	if (udp_sock_of(sk))
		own_udp(task, sk);
	else
		own_accepted(task, tcp_subflow(sk));
	return 0;
}

SEC("cgroup/sock_create")
int conns_udp_owner(struct bpf_sock *sk)
{
	if (sk->protocol != IPPROTO_UDP)
		return 1;
	u64 cookie = bpf_get_socket_cookie(sk);
	struct owner o = {
		.pid = bpf_get_current_pid_tgid() >> 32,
		.cgroup_id = bpf_get_current_cgroup_id(),
	};
	bpf_get_current_comm(o.comm, sizeof(o.comm));
	struct task_struct___conns *task = (void *)bpf_get_current_task();
	o.netns = BPF_CORE_READ(task, nsproxy, net_ns, ns.inum);
	bpf_map_update_elem(&owners, &cookie, &o, BPF_ANY);
	return 1; /* observe only: never refuse a socket */
}

SEC("cgroup_skb/ingress")
int conns_udp_ingress(struct __sk_buff *skb)
{
	udp_packet(skb, true);
	return 1; /* observe only: always let the packet pass */
}

SEC("cgroup_skb/egress")
int conns_udp_egress(struct __sk_buff *skb)
{
	udp_packet(skb, false);
	return 1;
}

/*
 * conns_udp_drop: a datagram that the ingress program counted (cgroup_skb
 * runs in sk_filter(), before the datagram is queued) and that
 * __udp_enqueue_schedule_skb() then refused. The skb argument exists since
 * 6.10 (user space attaches the program only where the tracepoint has it).
 */
SEC("tp_btf/udp_fail_queue_rcv_skb")
int BPF_PROG(conns_udp_drop, int rc, struct sock *sk, struct sk_buff *skb)
{
	udp_dropped(sk, skb);
	return 0;
}

/* ---- UDP through fentry/fexit: programs that run for UDP datagrams only ---- */

SEC("fentry/udp_send_skb")
int BPF_PROG(conns_udp_send, struct sk_buff *skb, struct flowi4 *fl4, struct inet_cork *cork)
{
	struct flow_key k = { .family = AF_INET };

	__builtin_memcpy(k.laddr, &fl4->saddr, 4);
	__builtin_memcpy(k.raddr, &fl4->daddr, 4);
	k.lport = bpf_ntohs(fl4->uli.ports.sport);
	k.rport = bpf_ntohs(fl4->uli.ports.dport);
	udp_sent(skb, &k, cork);
	return 0;
}

SEC("fentry/udp_v6_send_skb")
int BPF_PROG(conns_udp6_send, struct sk_buff *skb, struct flowi6 *fl6, struct inet_cork *cork)
{
	struct flow_key k = { .family = AF_INET6 };

	__builtin_memcpy(k.laddr, &fl6->saddr, 16);
	__builtin_memcpy(k.raddr, &fl6->daddr, 16);
	k.lport = bpf_ntohs(fl6->uli.ports.sport);
	k.rport = bpf_ntohs(fl6->uli.ports.dport);
	udp_sent(skb, &k, cork);
	return 0;
}

/* Every datagram a UDP socket receives passes __udp_enqueue_schedule_skb():
 * counted on the way in, moved to drops on the way out if it was refused.
 * The skb is read at entry: once queued, a reader on another CPU may free
 * it before the function returns; a refused one is still the caller's. */
SEC("fentry/__udp_enqueue_schedule_skb")
int BPF_PROG(conns_udp_enqueue, struct sock *sk, struct sk_buff *skb)
{
	struct flow_key k = {};
	int payload;

	if (!udp_sock_of(sk))
		return 0;
	payload = skb_udp_key(sk, skb, &k);
	if (payload >= 0)
		udp_account(&k, sock_cgroup_id(sk), payload, skb_datagrams(skb), true);
	return 0;
}

SEC("fexit/__udp_enqueue_schedule_skb")
int BPF_PROG(conns_udp_enqueue_exit, struct sock *sk, struct sk_buff *skb, int ret)
{
	if (ret && udp_sock_of(sk))
		udp_dropped(sk, skb);
	return 0;
}
