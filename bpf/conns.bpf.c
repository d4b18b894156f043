// SPDX-License-Identifier: GPL-2.0
/*
 * Connection tracking for `stacktop top/stream`.
 *
 * TCP: one entry per socket in `conns`, keyed by the socket cookie. The
 * lifecycle comes from tp_btf/inet_sock_set_state; bytes are the return
 * values of the send and receive calls, i.e. bytes that actually moved: of
 * sock_sendmsg/sock_recvmsg (tp_btf/sock_send_length and sock_recv_length,
 * the tracepoint backend) or of tcp_sendmsg/tcp_recvmsg and their UDP
 * counterparts (fexit, the fentry backend), both recorded by socket_io().
 * Segments, smoothed RTT and retransmits are copied from the kernel's own
 * tcp_sock counters at every event of the socket. When a socket reaches
 * TCP_CLOSE its final entry goes to the ring buffer and the entry is deleted.
 *
 * UDP: one entry per (socket, local addr:port, remote addr:port) in `flows`,
 * updated by cgroup_skb ingress/egress on the cgroup v2 root, which sees each
 * datagram with its socket, so unconnected sockets are split by peer.
 *
 * Owners (pid, comm, cgroup, netns) are taken only in process context (the
 * send/recv syscalls, connect and listen) and kept with the socket: in the
 * TCP entry itself, and for UDP in the `owners` LRU map keyed by cookie,
 * which the softirq-side cgroup_skb programs read. The current task in
 * softirq is whoever was interrupted and is never used.
 */
#include "stacktop.h"

char LICENSE[] SEC("license") = "GPL";

#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2
#define TCP_SYN_RECV 3
#define TCP_CLOSE 7
#define TCP_LISTEN 10
#define SOCK_STREAM 1
#define SOCK_DGRAM 2
#define MSG_PEEK 2

#define MAX_CONNS 65536
#define MAX_FLOWS 65536

enum drop_counter {
	DROP_LOST = 0,     /* ring buffer full: a closed event was not delivered */
	DROP_MAP_FULL = 1, /* a new connection or flow found its map full */
	DROP_COVERED = 2,  /* state changes conns_tcp_state_spare applied (see there) */
	DROP_NR,
};

enum conn_flags {
	CONN_PARTIAL = 1, /* first seen after its start: counters are incomplete */
};

struct owner {
	u64 cgroup_id;
	u32 pid;
	u32 netns;
	char comm[16];
};

struct conn {
	u64 cookie;
	u64 bytes_in;
	u64 bytes_out;
	u64 packets_in;
	u64 packets_out;
	struct owner owner;
	u32 srtt_us;
	u32 retrans;
	u8 saddr[16];
	u8 daddr[16];
	u16 sport;
	u16 dport;
	u16 family;
	u8 state;
	u8 flags;
};

struct flow_key {
	u64 cookie;
	u8 laddr[16];
	u8 raddr[16];
	u16 lport;
	u16 rport;
	u16 family;
	u16 pad;
};

struct flow {
	u64 bytes_in;
	u64 bytes_out;
	u64 packets_in;
	u64 packets_out;
	u64 last_ns; /* bpf_ktime_get_ns of the last datagram, for idle expiry */
	u64 cgroup_id;
	struct owner owner;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CONNS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, u64);
	__type(value, struct conn);
} conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_FLOWS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct flow_key);
	__type(value, struct flow);
} flows SEC(".maps");

/* UDP sockets have no lifecycle tracepoint, so their owners live in an LRU
 * map that forgets sockets nobody has used for a while. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FLOWS);
	__type(key, u64);
	__type(value, struct owner);
} owners SEC(".maps");

struct listener_key {
	u32 netns;
	u16 port;
	u16 pad;
};

/* Owners of listening sockets by (netns, port): a child socket is created
 * in softirq, and takes its listener's owner until its own process uses it.
 * User space adds the listeners that existed before start-up. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct listener_key);
	__type(value, struct owner);
} listeners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} closed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_NR);
	__type(key, u32);
	__type(value, u64);
} drops SEC(".maps");

static __always_inline void count_drop(u32 which)
{
	u64 *v = bpf_map_lookup_elem(&drops, &which);
	if (v)
		*v += 1;
}


/* Tracing programs may call bpf_get_socket_cookie since 5.12; user space
 * clears this on older kernels, where a socket's cookie is read from the
 * socket instead and is 0 until something (sock_diag, a cgroup_skb program)
 * asks for it. */
const volatile bool tracing_cookie = true;

/* socket_cookie returns the socket's cookie, or 0 where the kernel cannot
 * give one to a tracing program and none was made yet. */
static __always_inline u64 socket_cookie(struct sock *sk)
{
	if (tracing_cookie)
		return bpf_get_socket_cookie(sk);
	return BPF_CORE_READ(sk, __sk_common.skc_cookie.counter);
}

/* tcp_key is the socket's key in `conns`: its cookie or, on kernels where
 * a tracing program cannot make one, its address until it has one. A
 * socket keeps the key it was first tracked under, so its entry never
 * moves; sockets that existed before start-up got their cookies from the
 * sock_diag listing, so their entries match that listing. Addresses are
 * kernel pointers, far above any cookie. */
static __always_inline u64 tcp_key(struct sock *sk)
{
	if (tracing_cookie)
		return bpf_get_socket_cookie(sk);
	u64 addr = (u64)sk;
	u64 cookie = BPF_CORE_READ(sk, __sk_common.skc_cookie.counter);
	if (!cookie || bpf_map_lookup_elem(&conns, &addr))
		return addr;
	return cookie;
}

static __always_inline u32 sock_netns(const struct sock *sk)
{
	return BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
}

/* set_owner records the current task: call it only in process context. */
static __always_inline void set_owner(struct owner *o, const struct sock *sk)
{
	o->pid = bpf_get_current_pid_tgid() >> 32;
	o->cgroup_id = bpf_get_current_cgroup_id();
	o->netns = sock_netns(sk);
	bpf_get_current_comm(o->comm, sizeof(o->comm));
}

static __always_inline bool is_inet(const struct sock *sk, u16 type, u16 protocol)
{
	u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	return (family == AF_INET || family == AF_INET6) && BPF_CORE_READ(sk, sk_type) == type &&
	       BPF_CORE_READ(sk, sk_protocol) == protocol;
}

/* refresh copies what changes over a connection's life from the socket. */
static __always_inline void refresh(struct conn *c, const struct sock *sk)
{
	const struct tcp_sock *tp = (const void *)sk;

	c->packets_in = BPF_CORE_READ(tp, segs_in);
	c->packets_out = BPF_CORE_READ(tp, segs_out);
	c->srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;
	c->retrans = BPF_CORE_READ(tp, total_retrans);
	c->state = BPF_CORE_READ(sk, __sk_common.skc_state);
	c->owner.netns = sock_netns(sk); /* the socket's, known even before its owner */
}

/* read_tuple copies the addresses and ports. A connecting socket gets its
 * local address and port during connect(), so it is read on every event but
 * the last: by the time TCP_CLOSE is traced, inet_put_port() has already
 * zeroed the local port. */
static __always_inline void read_tuple(struct conn *c, const struct sock *sk)
{
	c->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (c->family == AF_INET) {
		bpf_core_read(c->saddr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(c->daddr, 4, &sk->__sk_common.skc_daddr);
	} else {
		bpf_core_read(c->saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(c->daddr, 16, &sk->__sk_common.skc_v6_daddr);
	}
	c->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	c->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
}

/* tcp_entry returns the socket's entry, creating it when create is set. */
static __always_inline struct conn *tcp_entry(struct sock *sk, u64 cookie, bool create, u8 flags)
{
	struct conn *c = bpf_map_lookup_elem(&conns, &cookie);
	if (c || !create)
		return c;
	/* User space reads the table while programs run: an entry is inserted
	 * complete, never seen without its addresses and state. */
	struct conn fresh = { .cookie = cookie, .flags = flags };
	refresh(&fresh, sk);
	read_tuple(&fresh, sk);
	long err = bpf_map_update_elem(&conns, &cookie, &fresh, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST: another CPU created it first */) {
		count_drop(DROP_MAP_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&conns, &cookie);
}

/* tcp_state_change records a TCP socket's move from oldstate to newstate. */
static __always_inline void tcp_state_change(struct sock *sk, int oldstate, int newstate)
{
	if (!is_inet(sk, SOCK_STREAM, IPPROTO_TCP))
		return;
	/* A child socket is cloned from its listener into SYN_RECV, in
	 * softirq, still carrying the listener's cookie (reset only later on
	 * 5.10 and 6.1): it is taken as born when it becomes ESTABLISHED,
	 * moments later in the same softirq, with its own identity. One that
	 * dies in SYN_RECV instead (it lost a race with a twin created for the
	 * same handshake) was never a connection of its own. */
	if (newstate == TCP_SYN_RECV || (oldstate == TCP_SYN_RECV && newstate == TCP_CLOSE))
		return;
	bool accepted = oldstate == TCP_SYN_RECV && newstate == TCP_ESTABLISHED;
	/* connect() and listen() start a socket's life in its process. */
	bool started = newstate == TCP_SYN_SENT || newstate == TCP_LISTEN;
	u64 cookie = tcp_key(sk);
	if (started)
		bpf_map_delete_elem(&conns, &cookie); /* a socket reused after close */
	struct conn *c = tcp_entry(sk, cookie, true, started || accepted ? 0 : CONN_PARTIAL);
	if (!c)
		return;
	if (started)
		set_owner(&c->owner, sk);
	refresh(c, sk);
	if (newstate != TCP_CLOSE || !c->family)
		read_tuple(c, sk);
	c->state = newstate; /* the socket's own field changes after the tracepoint */
	struct listener_key lk = { .netns = c->owner.netns, .port = c->sport };
	if (newstate == TCP_LISTEN)
		bpf_map_update_elem(&listeners, &lk, &c->owner, BPF_ANY);
	if (accepted) {
		/* Its local port is its listener's. A fast-open child may have
		 * been read already: it keeps what it has, but is whole. */
		c->flags &= ~CONN_PARTIAL;
		struct owner *o = bpf_map_lookup_elem(&listeners, &lk);
		if (o && !c->owner.pid)
			c->owner = *o;
	}
	if (newstate != TCP_CLOSE)
		return;
	if (oldstate == TCP_LISTEN)
		bpf_map_delete_elem(&listeners, &lk);
	if (bpf_ringbuf_output(&closed, c, sizeof(*c), 0))
		count_drop(DROP_LOST);
	bpf_map_delete_elem(&conns, &cookie);
}

/*
 * The kernel skips a tracing program's run while the same program is
 * already running on the CPU: a state change in softirq that interrupts one
 * in process context (mass closes do this all the time), or on 7.x a task
 * preempted inside the program. Two programs share the tracepoint and are
 * called in the order they were attached: conns_tcp_state applies every
 * change it runs for and then marks the socket with it;
 * conns_tcp_state_spare applies only a change the socket is not marked
 * with, i.e. one the first program's run was skipped for. Changes of one
 * socket do not interrupt each other (the socket lock serialises them), so
 * a mark per socket tells events apart where per-CPU state cannot: it holds
 * across a preemption between the two programs. Keyed by the socket's
 * address: a socket reusing a freed one's memory starts with a move out of
 * TCP_CLOSE, which no last move of the old one (into TCP_CLOSE) equals.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* a mark only has to live from one program to the next */
	__type(key, u64);
	__type(value, u32);
} state_marks SEC(".maps");

static __always_inline u32 state_mark(int oldstate, int newstate)
{
	return (u32)oldstate << 16 | (u32)newstate;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(conns_tcp_state, struct sock *sk, int oldstate, int newstate)
{
	u64 key = (u64)sk;
	u32 mark = state_mark(oldstate, newstate);

	tcp_state_change(sk, oldstate, newstate);
	bpf_map_update_elem(&state_marks, &key, &mark, BPF_ANY);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(conns_tcp_state_spare, struct sock *sk, int oldstate, int newstate)
{
	u64 key = (u64)sk;
	u32 *mark = bpf_map_lookup_elem(&state_marks, &key);

	if (mark && *mark == state_mark(oldstate, newstate))
		return 0; /* conns_tcp_state ran for it */
	tcp_state_change(sk, oldstate, newstate);
	count_drop(DROP_COVERED);
	return 0;
}

/* socket_io records a send or receive call that returned ret on socket sk,
 * in the calling process. */
static __always_inline void socket_io(struct sock *sk, int ret, int flags, bool in)
{
	/* A failed or peeking call moved no bytes, but it still tells whose
	 * socket this is (an accepted socket's first read is often EAGAIN). */
	if (ret < 0 || (in && (flags & MSG_PEEK)))
		ret = 0;
	if (is_inet(sk, SOCK_DGRAM, IPPROTO_UDP)) {
		/* Without a cookie no datagram of it was seen yet either. */
		u64 cookie = socket_cookie(sk);
		if (!cookie)
			return;
		struct owner *known = bpf_map_lookup_elem(&owners, &cookie);
		if (known && known->pid == bpf_get_current_pid_tgid() >> 32)
			return; /* the common case: spare a hash update per datagram */
		struct owner o = {};
		set_owner(&o, sk);
		bpf_map_update_elem(&owners, &cookie, &o, BPF_ANY);
		return;
	}
	if (!is_inet(sk, SOCK_STREAM, IPPROTO_TCP))
		return;
	/* A closed socket has reported its totals already: do not revive it. */
	bool alive = BPF_CORE_READ(sk, __sk_common.skc_state) != TCP_CLOSE;
	struct conn *c = tcp_entry(sk, tcp_key(sk), alive, CONN_PARTIAL);
	if (!c)
		return;
	if (ret && in)
		__sync_fetch_and_add(&c->bytes_in, ret);
	else if (ret)
		__sync_fetch_and_add(&c->bytes_out, ret);
	set_owner(&c->owner, sk);
	refresh(c, sk);
	read_tuple(c, sk);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(conns_send, struct sock *sk, int ret, int flags)
{
	socket_io(sk, ret, flags, false);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(conns_recv, struct sock *sk, int ret, int flags)
{
	socket_io(sk, ret, flags, true);
	return 0;
}

/*
 * The fentry backend: user space loads each program once per function, for
 * tcp_sendmsg, udp_sendmsg and udpv6_sendmsg, and tcp_recvmsg, udp_recvmsg
 * and udpv6_recvmsg. The receive functions lost their nonblock parameter in
 * 5.19 and their addr_len parameter in 6.16; user space picks the variant
 * that matches the kernel's BTF.
 */
SEC("fexit/tcp_sendmsg")
int BPF_PROG(conns_fexit_send, struct sock *sk, void *msg, u64 len, int ret)
{
	socket_io(sk, ret, 0, false);
	return 0;
}

SEC("fexit/tcp_recvmsg")
int BPF_PROG(conns_fexit_recv, struct sock *sk, void *msg, u64 len, int flags, int ret)
{
	socket_io(sk, ret, flags, true);
	return 0;
}

SEC("fexit/tcp_recvmsg")
int BPF_PROG(conns_fexit_recv_addr_len, struct sock *sk, void *msg, u64 len, int flags, int *addr_len, int ret)
{
	socket_io(sk, ret, flags, true);
	return 0;
}

SEC("fexit/tcp_recvmsg")
int BPF_PROG(conns_fexit_recv_nonblock, struct sock *sk, void *msg, u64 len, int nonblock, int flags,
	     int *addr_len, int ret)
{
	socket_io(sk, ret, flags, true);
	return 0;
}

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

static __always_inline void udp_packet(struct __sk_buff *skb, bool ingress)
{
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
		if (err && err != -17) {
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
