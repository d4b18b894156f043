// SPDX-License-Identifier: GPL-2.0
/*
 * Connection tracking for `stacktop top/stream`.
 *
 * TCP: one entry per socket in `conns`, keyed by the socket cookie. The
 * lifecycle comes from tp_btf/inet_sock_set_state. No program runs on the
 * data path: bytes, segments, smoothed RTT and retransmits are the kernel's
 * own tcp_sock counters, read by conns_refresh (an iterator over `conns`
 * that user space runs once per refresh) and at every state change, a last
 * time at TCP_CLOSE, whose final entry goes to the ring buffer before the
 * entry is deleted. Bytes are what the application wrote and read, derived
 * from sequence space (see tcp_bytes()).
 *
 * The socket-side programs read kernel memory directly (BTF pointers: a
 * load each, no helper call): a state change or a close then costs about
 * what its map operations cost.
 *
 * UDP: one entry per (socket, local addr:port, remote addr:port) in `flows`,
 * updated by cgroup_skb ingress/egress on the cgroup v2 root, which sees each
 * datagram with its socket, so unconnected sockets are split by peer.
 *
 * Owners (pid, comm, cgroup, netns) are taken only in process context and
 * kept with the socket: connect() and listen() (state changes in the
 * caller), the exit of accept()/accept4() for accepted sockets, socket()
 * for UDP sockets (cgroup/sock_create, into the `owners` LRU map that the
 * softirq-side cgroup_skb programs read). The current task in softirq is
 * whoever was interrupted and is never used.
 */
#include "stacktop.h"

char LICENSE[] SEC("license") = "GPL";

/* Kernel types only this object reads, relocated like stacktop.h's; the
 * ___conns flavours are the kernel's struct of that name. */
#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
struct sock_common___conns {
	unsigned long skc_flags; /* sk_flags: enum sock_flags bits */
};

struct tcp_sock___conns {
	u32 write_seq;
};

struct file {
	void *private_data;
};

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
};

struct files_struct {
	struct fdtable *fdt;
};

struct socket {
	struct sock *sk;
};

struct nsproxy {
	struct net *net_ns;
};

struct task_struct___conns {
	struct files_struct *files;
	struct nsproxy *nsproxy;
};

struct bpf_iter_meta;

struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
	u32 uid;
};

#pragma clang attribute pop

#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2
#define TCP_SYN_RECV 3
#define TCP_FIN_WAIT1 4
#define TCP_FIN_WAIT2 5
#define TCP_TIME_WAIT 6
#define TCP_CLOSE 7
#define TCP_LAST_ACK 9
#define TCP_LISTEN 10
#define TCP_CLOSING 11
#define SOCK_DONE 1 /* enum sock_flags: set by tcp_fin() when the peer's FIN arrives */

#define MAX_CONNS 65536
#define MAX_FLOWS 65536

/*
 * The contract with internal/conntrack: bpf2go exports these enums (-type)
 * and the Go code uses the generated names. An enum reaches the object's
 * BTF only through a map or struct declared with it: drops is keyed by
 * enum drop_counter, and conn.flags is an enum conn_flags (packed: one byte).
 */
enum drop_counter {
	DROP_LOST = 0,     /* ring buffer full: a closed event was not delivered */
	DROP_MAP_FULL = 1, /* a new connection or flow found its map full */
	DROP_COVERED = 2,  /* state changes conns_tcp_state_spare applied (see there) */
	DROP_NR,
};

enum __attribute__((packed)) conn_flags {
	CONN_PARTIAL = 1, /* first seen after its start (existed before stacktop) */
	CONN_ACTIVE = 2,  /* this end sent the SYN (connect()): write_seq counts it */
	CONN_CLOSED = 4,  /* reached TCP_CLOSE: bytes_out is final, reported when destroyed */
	CONN_OWNED = 8,   /* owner taken from the socket's own process (not its listener's) */
};

struct owner {
	u64 cgroup_id;
	u32 pid;
	u32 netns;
	char comm[16];
};

struct conn {
	u64 cookie;
	u64 sk; /* the socket's address: accepted() checks it found the right entry */
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
	enum conn_flags flags;
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
	u64 drops_in; /* datagrams counted at ingress that the socket then dropped */
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

/* Network namespaces that have tracked sockets, for user space: the
 * iterators walk one namespace at a time. An entry's creation adds its
 * namespace; user space takes the new ones and removes them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, u8);
} netns_new SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} closed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_NR);
	__type(key, enum drop_counter);
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
	u64 cookie = sk->__sk_common.skc_cookie.counter;
	if (!cookie || bpf_map_lookup_elem(&conns, &addr))
		return addr;
	return cookie;
}

/* sock_netns: sk must be a BTF pointer (a tp_btf argument, an iterator's
 * socket), read directly. */
static __always_inline u32 sock_netns(const struct sock *sk)
{
	return sk->__sk_common.skc_net.net->ns.inum;
}

/* set_owner records the current task: call it only in process context. The
 * netns is the socket's, which every entry has from its creation. */
static __always_inline void set_owner(struct owner *o)
{
	o->pid = bpf_get_current_pid_tgid() >> 32;
	o->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(o->comm, sizeof(o->comm));
}

/* tcp_of returns an inet TCP socket as the tcp_sock it is (whose fields
 * can then be read directly), or NULL for anything else. */
static __always_inline const struct tcp_sock *tcp_of(struct sock *sk)
{
	const struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk); /* full socket, IPPROTO_TCP */
	if (!tp)
		return NULL;
	u16 family = sk->__sk_common.skc_family;
	return (family == AF_INET || family == AF_INET6) && sk->sk_type == SOCK_STREAM ? tp : NULL;
}

/* fin_queued reports whether our FIN is in write_seq in this state:
 * tcp_send_fin() runs right after the move into FIN_WAIT1 or LAST_ACK, so a
 * state change passes the state the FIN was (or was not) sent from. */
static __always_inline bool fin_queued(int state)
{
	return state == TCP_FIN_WAIT1 || state == TCP_FIN_WAIT2 || state == TCP_CLOSING ||
	       state == TCP_LAST_ACK || state == TCP_TIME_WAIT;
}

/*
 * tcp_bytes derives the bytes the application read and wrote from the
 * socket's sequence space, so that no program has to run per call.
 *
 * Read: bytes_received counts every in-order byte the peer sent, its FIN
 * included (tcp_rcv_nxt_update(); the SYN is not), and rcv_nxt - copied_seq
 * is what sits in the receive queue unread. recvmsg() moves copied_seq past
 * the FIN when it returns end-of-file: a FIN that arrived (SOCK_DONE) and is
 * not in the unread part was read, and is taken off.
 *
 * Written: bytes_acked counts what the peer acknowledged (our SYN included
 * on the connecting side: its snd_una starts at the SYN, an accepted
 * socket's after it), write_seq - snd_una what the application queued that
 * is not acknowledged yet; our SYN and FIN each take one sequence number.
 *
 * Both stay exact past 4 GiB: the 64-bit counters carry the total, the
 * 32-bit differences are bounded by the buffers.
 */
static __always_inline void tcp_bytes(struct conn *c, const struct tcp_sock *tp, int fin_state)
{
	const struct sock *sk = (const void *)tp;
	u64 received = tp->bytes_received;
	u32 unread = tp->rcv_nxt - tp->copied_seq;
	bool fin_in = ((const struct sock_common___conns *)&sk->__sk_common)->skc_flags & (1UL << SOCK_DONE);
	u64 in = received - unread - (fin_in && !unread);
	u64 out = tp->bytes_acked + (u32)(((const struct tcp_sock___conns *)tp)->write_seq - tp->snd_una);
	u64 control = !!(c->flags & CONN_ACTIVE) + fin_queued(fin_state);

	c->bytes_in = in > received ? 0 : in; /* never wraps, even on a torn read */
	c->bytes_out = out > control ? out - control : 0;
}

/* refresh copies what changes over a connection's life from the socket;
 * fin_state is the state that says whether our FIN is in its sequence space. */
static __always_inline void refresh(struct conn *c, const struct tcp_sock *tp, int fin_state)
{
	tcp_bytes(c, tp, fin_state);
	c->packets_in = tp->segs_in;
	c->packets_out = tp->segs_out;
	c->srtt_us = tp->srtt_us >> 3;
	c->retrans = tp->total_retrans;
	c->owner.netns = sock_netns((const void *)tp); /* the socket's, known even before its owner */
}

/* read_tuple copies the addresses and ports. A connecting socket gets its
 * local address and port during connect(), so it is read on every event but
 * the last: by the time TCP_CLOSE is traced, inet_put_port() has already
 * zeroed the local port. */
static __always_inline void read_tuple(struct conn *c, const struct sock *sk)
{
	const struct sock_common *skc = &sk->__sk_common;

	c->family = skc->skc_family;
	if (c->family == AF_INET) {
		__builtin_memcpy(c->saddr, &skc->skc_rcv_saddr, 4);
		__builtin_memcpy(c->daddr, &skc->skc_daddr, 4);
	} else {
		__builtin_memcpy(c->saddr, &skc->skc_v6_rcv_saddr, 16);
		__builtin_memcpy(c->daddr, &skc->skc_v6_daddr, 16);
	}
	c->sport = skc->skc_num;
	c->dport = bpf_ntohs(skc->skc_dport);
}

/* active_guess tells whether a socket first seen after its start made its
 * connection with connect(): unless its local port is a known listener's. */
static __always_inline bool active_guess(const struct conn *c)
{
	struct listener_key lk = { .netns = c->owner.netns, .port = c->sport };
	return !bpf_map_lookup_elem(&listeners, &lk);
}

/* tcp_entry returns the socket's entry, creating it with flags if it has
 * none (*created tells); fin_state as for refresh(). */
static __always_inline struct conn *tcp_entry(const struct tcp_sock *tp, u64 cookie, u8 flags, int fin_state,
					      bool *created)
{
	const struct sock *sk = (const void *)tp;
	struct conn *c = bpf_map_lookup_elem(&conns, &cookie);
	if (c)
		return c;
	/* User space reads the table while programs run: an entry is inserted
	 * complete, never seen without its addresses and state. */
	struct conn fresh = { .cookie = cookie, .sk = (u64)sk, .flags = flags };
	read_tuple(&fresh, sk);
	refresh(&fresh, tp, fin_state);
	if ((flags & CONN_PARTIAL) && active_guess(&fresh))
		fresh.flags |= CONN_ACTIVE;
	fresh.state = sk->__sk_common.skc_state;
	long err = bpf_map_update_elem(&conns, &cookie, &fresh, BPF_NOEXIST);
	if (err == -EEXIST) /* another CPU created it first */
		return bpf_map_lookup_elem(&conns, &cookie);
	if (err) {
		count_drop(DROP_MAP_FULL);
		return NULL;
	}
	*created = true;
	u8 one = 1;
	if (!bpf_map_lookup_elem(&netns_new, &fresh.owner.netns))
		bpf_map_update_elem(&netns_new, &fresh.owner.netns, &one, BPF_NOEXIST);
	return bpf_map_lookup_elem(&conns, &cookie);
}

/* The ring's reader is woken only once this much waits in it: user space
 * drains it at every refresh anyway (ringbuf.Reader.Flush), and a wakeup
 * per event (the default) costs the closing program a self-IPI and the
 * reader's wakeup, microseconds on a virtual machine. A quarter of the
 * 4 MiB ring leaves room for a burst while the reader catches up. */
#define CLOSED_WAKEUP_BYTES (1 << 20)

/* report_closed writes a closed connection's final entry to the ring. */
static __always_inline void report_closed(struct conn *c)
{
	u64 wake = bpf_ringbuf_query(&closed, BPF_RB_AVAIL_DATA) >= CLOSED_WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP :
											  BPF_RB_NO_WAKEUP;
	c->state = TCP_CLOSE;
	if (bpf_ringbuf_output(&closed, c, sizeof(*c), wake))
		count_drop(DROP_LOST);
}

/* tracked_change tells the state changes the programs record. A child
 * socket is cloned from its listener into SYN_RECV, in softirq, still
 * carrying the listener's cookie (reset only later on 5.10 and 6.1): it is
 * taken as born when it becomes ESTABLISHED, moments later in the same
 * softirq, with its own identity. One that dies in SYN_RECV instead (it
 * lost a race with a twin created for the same handshake) was never a
 * connection of its own. */
static __always_inline bool tracked_change(int oldstate, int newstate)
{
	return newstate != TCP_SYN_RECV && !(oldstate == TCP_SYN_RECV && newstate == TCP_CLOSE);
}

/*
 * The kernel skips a tracing program's run while the same program is
 * already running on the CPU: a state change in softirq that interrupts one
 * in process context (mass closes do this all the time), or on 7.x a task
 * preempted inside the program. Two programs share the tracepoint and are
 * called in the order they were attached: conns_tcp_state applies every
 * change it runs for, conns_tcp_state_spare only one the first program's
 * run was skipped for. Changes of one socket do not interrupt each other
 * (the socket lock serialises them), so the socket's own entry tells the
 * two apart where per-CPU state cannot (it holds across a preemption
 * between the two programs): conns_tcp_state leaves it in the new state,
 * a skipped run in the old one. A change that leaves no entry — one that
 * is not tracked (a child's birth into SYN_RECV, about one per accepted
 * connection) or that found the table full — the first program marks here
 * instead, by socket address, and the spare consumes the mark: so that the
 * spare counts only the changes whose first run was skipped (the loss
 * counter subtracts them from the kernel's count of skipped runs), and
 * neither applies nor counts a table-full change twice.
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

static __always_inline void mark_change(const struct sock *sk, int oldstate, int newstate)
{
	u64 key = (u64)sk;
	u32 mark = state_mark(oldstate, newstate);
	bpf_map_update_elem(&state_marks, &key, &mark, BPF_ANY);
}

/* marked tells whether conns_tcp_state marked this change, and consumes
 * the mark: a socket reusing the memory may make the same change again. */
static __always_inline bool marked(const struct sock *sk, int oldstate, int newstate)
{
	u64 key = (u64)sk;
	u32 *mark = bpf_map_lookup_elem(&state_marks, &key);
	if (!mark || *mark != state_mark(oldstate, newstate))
		return false;
	bpf_map_delete_elem(&state_marks, &key);
	return true;
}

/* tcp_state_change records a TCP socket's move from oldstate to newstate
 * (a tracked_change) in the entry under cookie; false if it has none (the
 * table is full). */
static __always_inline bool tcp_state_change(struct sock *sk, const struct tcp_sock *tp, u64 cookie, int oldstate,
					     int newstate)
{
	bool accepted = oldstate == TCP_SYN_RECV && newstate == TCP_ESTABLISHED;
	/* connect() and listen() start a socket's life in its process. */
	bool started = newstate == TCP_SYN_SENT || newstate == TCP_LISTEN;
	/* The FIN is queued right after the move into FIN_WAIT1 or LAST_ACK;
	 * a move into TCP_CLOSE keeps what the state before it had queued. */
	int fin_state = newstate == TCP_CLOSE || newstate == TCP_FIN_WAIT1 || newstate == TCP_LAST_ACK ?
				oldstate : newstate;
	if (started) {
		/* A socket reused after close (connect() again) ends its
		 * previous connection here. */
		struct conn *old = bpf_map_lookup_elem(&conns, &cookie);
		if (old) {
			if (old->flags & CONN_CLOSED)
				report_closed(old);
			bpf_map_delete_elem(&conns, &cookie);
		}
	}
	u8 flags = newstate == TCP_SYN_SENT ? CONN_ACTIVE : started || accepted ? 0 : CONN_PARTIAL;
	bool created = false;
	struct conn *c = tcp_entry(tp, cookie, flags, fin_state, &created);
	if (!c)
		return false;
	/* close() and shutdown() move a socket into FIN_WAIT1 or LAST_ACK
	 * in its process: without accept()'s exit (tcp-accept refused), that
	 * is where an accepted socket learns its owner. */
	bool closing = newstate == TCP_FIN_WAIT1 || newstate == TCP_LAST_ACK;
	if (started || (closing && !(c->flags & CONN_OWNED))) {
		set_owner(&c->owner);
		c->flags |= CONN_OWNED;
	}
	if (!created) { /* a new entry has read both a moment ago */
		if (newstate != TCP_CLOSE || !c->family)
			read_tuple(c, sk);
		refresh(c, tp, fin_state);
	}
	c->state = newstate; /* the socket's own field changes after the tracepoint */
	struct listener_key lk = { .netns = c->owner.netns, .port = c->sport };
	if (newstate == TCP_LISTEN)
		bpf_map_update_elem(&listeners, &lk, &c->owner, BPF_ANY);
	if (accepted) {
		/* Its local port is its listener's; it is whole. */
		c->flags &= ~(CONN_PARTIAL | CONN_ACTIVE);
		struct owner *o = bpf_map_lookup_elem(&listeners, &lk);
		if (o && !c->owner.pid)
			c->owner = *o;
	}
	if (newstate != TCP_CLOSE)
		return true;
	/* What it wrote is final; what it reads is not yet: the application
	 * may still read what is queued (the peer's FIN can complete the
	 * close before that), so the entry is reported when the socket is
	 * destroyed, by tcp_destroyed(). */
	c->flags |= CONN_CLOSED;
	if (oldstate == TCP_LISTEN)
		bpf_map_delete_elem(&listeners, &lk);
	return true;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(conns_tcp_state, struct sock *sk, int oldstate, int newstate)
{
	const struct tcp_sock *tp = tracked_change(oldstate, newstate) ? tcp_of(sk) : NULL;

	if (!tp || !tcp_state_change(sk, tp, tcp_key(sk), oldstate, newstate))
		mark_change(sk, oldstate, newstate);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(conns_tcp_state_spare, struct sock *sk, int oldstate, int newstate)
{
	const struct tcp_sock *tp = tracked_change(oldstate, newstate) ? tcp_of(sk) : NULL;
	u64 cookie = tp ? tcp_key(sk) : 0;
	struct conn *c = tp ? bpf_map_lookup_elem(&conns, &cookie) : NULL;

	if (c ? c->state == newstate : marked(sk, oldstate, newstate))
		return 0; /* conns_tcp_state ran for it */
	if (tp)
		tcp_state_change(sk, tp, cookie, oldstate, newstate);
	count_drop(DROP_COVERED);
	return 0;
}

/*
 * tcp_destroyed reports a socket's final entry when the kernel destroys it
 * (the application closed it, or it was an orphan that reached
 * TCP_CLOSE): its bytes read are final only now. It returns whether it
 * reported anything.
 */
static __always_inline bool tcp_destroyed(struct sock *sk)
{
	const struct tcp_sock *tp = tcp_of(sk);
	if (!tp)
		return false;
	u64 key = tcp_key(sk);
	struct conn *c = bpf_map_lookup_elem(&conns, &key);
	if (!c)
		return false;
	u64 out = c->bytes_out;
	refresh(c, tp, c->state); /* no move into TCP_CLOSE seen: as of its last state */
	if (c->flags & CONN_CLOSED)
		c->bytes_out = out;
	report_closed(c);
	bpf_map_delete_elem(&conns, &key);
	return true;
}

/* The same pair for the destruction: an entry still there when the spare
 * runs is one whose conns_tcp_destroy run the kernel skipped. */
SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(conns_tcp_destroy, struct sock *sk)
{
	tcp_destroyed(sk);
	return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(conns_tcp_destroy_spare, struct sock *sk)
{
	if (tcp_destroyed(sk))
		count_drop(DROP_COVERED);
	return 0;
}

/* tcp_socket returns the full TCP socket an iterator visits, or NULL for a
 * time-wait or request socket, one not bound to a connection yet or gone
 * (CLOSE), or a child still in SYN_RECV (taken at its ESTABLISHED). */
static __always_inline const struct tcp_sock *tcp_socket(struct sock_common *skc)
{
	if (!skc)
		return NULL;
	const struct tcp_sock *tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return NULL;
	int state = ((const struct sock *)tp)->__sk_common.skc_state;
	return state == TCP_CLOSE || state == TCP_SYN_RECV ? NULL : tp;
}

/*
 * conns_refresh runs over the TCP sockets of one network namespace (the one
 * of the task that opens the iterator) when user space reads it, once per
 * refresh and namespace: it copies each tracked socket's current counters
 * into its entry, so that every refresh shows them live, also while the
 * owner sleeps in a syscall or does nothing. A socket that reached
 * TCP_CLOSE is no longer in the tables the iterator walks; its final
 * counters are in its closed event, read at the change itself.
 */
SEC("iter/tcp")
int conns_refresh(struct bpf_iter__tcp *ctx)
{
	const struct tcp_sock *tp = tcp_socket(ctx->sk_common);
	if (!tp)
		return 0;
	struct sock *sk = (void *)tp;
	u64 key = tcp_key(sk);
	struct conn *c = bpf_map_lookup_elem(&conns, &key);
	if (!c)
		return 0;
	/* connect() moves a socket into SYN_SENT before it binds the local
	 * port (tcp_v4_connect, tcp_v6_connect: inet_hash_connect comes
	 * after), so that change recorded port 0; a socket the iterator
	 * walks is hashed, its port bound. */
	if (!c->sport)
		read_tuple(c, sk);
	refresh(c, tp, sk->__sk_common.skc_state);
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
	bool created = false;
	tcp_entry(tp, tcp_key(sk), CONN_PARTIAL, sk->__sk_common.skc_state, &created);
	return 0;
}

/* The syscalls' exit tracepoints, as tracefs describes them. */
struct sys_exit_args {
	u64 common;
	long syscall_nr;
	long ret;
};

/*
 * accepted_sock gives an accepted socket the owner of the task that accepted
 * it (a pre-forked worker, not the listener's creator). By then its
 * ESTABLISHED change has made its entry, keyed by the cookie that change
 * generated (or by its address, on 5.10).
 */
static __always_inline void accepted_sock(struct sock *sk)
{
	u64 key = BPF_CORE_READ(sk, __sk_common.skc_cookie.counter);
	struct conn *c = key ? bpf_map_lookup_elem(&conns, &key) : NULL;
	if (!c) {
		key = (u64)sk;
		c = bpf_map_lookup_elem(&conns, &key);
	}
	if (c && c->sk == (u64)sk) {
		set_owner(&c->owner);
		c->flags |= CONN_OWNED;
	}
}

/*
 * accepted finds the accepted socket from the new descriptor, which the
 * task installed a moment ago, at accept()'s exit.
 */
static __always_inline void accepted(long fd)
{
	if (fd < 0)
		return;
	struct task_struct___conns *task = (void *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *file = NULL;
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return;
	struct socket *sock = BPF_CORE_READ(file, private_data);
	struct sock *sk = BPF_CORE_READ(sock, sk);
	if (sk)
		accepted_sock(sk);
}

SEC("tracepoint/syscalls/sys_exit_accept4")
int conns_accept4(struct sys_exit_args *ctx)
{
	accepted(ctx->ret);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_accept")
int conns_accept(struct sys_exit_args *ctx)
{
	accepted(ctx->ret);
	return 0;
}

/* conns_udp_owner records who creates each UDP socket, in its process. */
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
 * conns_udp_drop: a datagram that cgroup_skb ingress counted (it runs in
 * sk_filter(), before the datagram is queued) and that __udp_enqueue_
 * schedule_skb() then refused: the receive buffer was full (the kernel's
 * UdpRcvbufErrors) or socket memory ran out (UdpMemErrors). It moves from
 * the flow's received datagrams to its drops. The skb argument exists since
 * 6.10 (user space attaches the program only where the tracepoint has it);
 * its headers are still in place, data is past the UDP header.
 */
SEC("tp_btf/udp_fail_queue_rcv_skb")
int BPF_PROG(conns_udp_drop, int rc, struct sock *sk, struct sk_buff *skb)
{
	struct flow_key k = {};
	unsigned char *head = BPF_CORE_READ(skb, head);
	u16 l3 = BPF_CORE_READ(skb, network_header), l4 = BPF_CORE_READ(skb, transport_header);
	struct {
		u16 sport, dport, len, csum;
	} udp;

	if (BPF_CORE_READ(skb, protocol) == bpf_htons(ETH_P_IP)) {
		k.family = AF_INET;
		bpf_probe_read_kernel(k.raddr, 4, head + l3 + 12);
		bpf_probe_read_kernel(k.laddr, 4, head + l3 + 16);
	} else {
		k.family = AF_INET6;
		bpf_probe_read_kernel(k.raddr, 16, head + l3 + 8);
		bpf_probe_read_kernel(k.laddr, 16, head + l3 + 24);
	}
	if (bpf_probe_read_kernel(&udp, sizeof(udp), head + l4))
		return 0;
	k.lport = bpf_ntohs(udp.dport);
	k.rport = bpf_ntohs(udp.sport);
	k.cookie = BPF_CORE_READ(sk, __sk_common.skc_cookie.counter); /* made by cgroup_skb */
	struct flow *f = bpf_map_lookup_elem(&flows, &k);
	if (!f)
		return 0;
	u64 payload = (u16)(bpf_ntohs(udp.len) - sizeof(udp));
	__sync_fetch_and_add(&f->bytes_in, -payload);
	__sync_fetch_and_add(&f->packets_in, -1);
	__sync_fetch_and_add(&f->drops_in, 1);
	return 0;
}
