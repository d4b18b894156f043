/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The maps and records of bpf/conns.bpf.c that every part shares, and the
 * contract with internal/conntrack (enums exported by bpf2go -type).
 */
#ifndef CONNS_H
#define CONNS_H

#include "stacktop.h"

/* The task fields the owner programs read, relocated like stacktop.h's; the
 * ___conns flavour is the kernel's struct task_struct. */
#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
struct nsproxy {
	struct net *net_ns;
};

/* dfl_cgrp->kn->id is the cgroup id bpf_get_current_cgroup_id() returns. */
struct css_set {
	struct cgroup *dfl_cgrp;
};

struct task_struct___conns {
	int tgid;
	char comm[16];
	struct nsproxy *nsproxy;
	struct css_set *cgroups;
	struct task_struct___conns *group_leader;
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
	CONN_GONE = 16,   /* set by the refresh only: no longer the socket at its address (refresh_entry) */
	CONN_STALE = 32,  /* set by the refresh only: not refreshed, as read from the table (refresh_entry) */
};

struct owner {
	u64 cgroup_id;
	u32 pid;
	u32 netns;
	char comm[16];
};

struct conn {
	u64 cookie;
	u64 sk; /* the socket's address: own_accepted() checks it found the right entry */
	u64 bytes_in;
	u64 bytes_out;
	u64 packets_in;
	u64 packets_out;
	struct owner owner;
	u32 srtt_us;
	u32 retrans;
	u32 sk_id; /* sock_identity(): which read-wait entry at address sk is this socket's (before 5.12) */
	/* (u32)(bytes_received - rcv_nxt) and (u32)(bytes_acked - snd_una) as
	 * read with the socket's lock held: the kernel moves each pair
	 * together, so a refresh that reads the socket without the lock tells
	 * a pair torn by an update in flight by its base (refresh_entry). */
	u32 rcv_base;
	u32 snd_base;
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

/* Network namespaces that have tracked sockets, for user space where the
 * refresh walks one namespace at a time (conns_refresh_netns). An entry's
 * creation adds its namespace; user space takes the new ones and removes
 * them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, u8);
} netns_new SEC(".maps");

/* User space sets this only where conns_refresh_netns is the refresh (the
 * kernel refused conns_refresh): everywhere else nothing reads netns_new,
 * and the verifier removes its lookup from every new connection. */
const volatile bool refresh_netns = false;

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

/* set_process_owner is set_owner with the process's name (its main
 * thread's) rather than the current thread's: the name conns_owners gives
 * an accepted socket, so that it does not depend on whether a refresh found
 * the socket before its process closed it. */
static __always_inline void set_process_owner(struct owner *o)
{
	set_owner(o);
	struct task_struct___conns *task = (void *)bpf_get_current_task();
	struct task_struct___conns *leader = BPF_CORE_READ(task, group_leader);
	bpf_core_read_str(o->comm, sizeof(o->comm), &leader->comm);
}

#endif /* CONNS_H */
