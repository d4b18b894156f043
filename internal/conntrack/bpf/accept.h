/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Accepted sockets' owners: the process that holds each one, found by an
 * iterator over every task's open files.
 */
#ifndef CONNS_ACCEPT_H
#define CONNS_ACCEPT_H

#include "conns.h"

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
struct file;

struct socket {
	struct sock *sk;
};

struct bpf_iter_meta;

struct bpf_iter__task_file {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
	u32 fd __attribute__((aligned(8)));
	struct file *file;
};

struct mptcp_sock {
	struct sock *first; /* the first subflow: a TCP socket */
};
#pragma clang attribute pop

#define IPPROTO_MPTCP 262

/* file_sock returns the socket that file holds, if it holds one. */
static __always_inline struct sock *file_sock(struct file *file)
{
	struct socket *sock = bpf_sock_from_file(file);
	return sock ? sock->sk : NULL;
}

/*
 * tcp_subflow returns sk or, for an MPTCP socket, its first subflow, which
 * is the TCP socket that the state changes, sock_diag and the table know.
 * Go's listeners are MPTCP by default (since Go 1.24) wherever the kernel
 * has MPTCP. The pointer is only compared and read through, never
 * dereferenced directly.
 */
static __always_inline struct sock *tcp_subflow(struct sock *sk)
{
	if (sk->sk_protocol != IPPROTO_MPTCP)
		return sk;
	if (!bpf_core_type_exists(struct mptcp_sock))
		return NULL;
	return BPF_CORE_READ((struct mptcp_sock *)sk, first);
}

/* set_holder makes o the owner of a socket that task holds. */
static __always_inline void set_holder(struct owner *o, struct task_struct___conns *task)
{
	o->pid = task->tgid;
	o->cgroup_id = task->cgroups->dfl_cgrp->kn->id;
	__builtin_memcpy(o->comm, task->group_leader->comm, sizeof(o->comm));
}

/*
 * own_udp gives a UDP socket that task holds an owner, unless it has one:
 * one that existed before start-up, which cgroup/sock_create never saw. Its
 * cookie is there: sock_diag generated it at start-up.
 */
static __always_inline void own_udp(struct task_struct___conns *task, struct sock *sk)
{
	u64 cookie = sk->__sk_common.skc_cookie.counter;
	if (!cookie || bpf_map_lookup_elem(&owners, &cookie))
		return;
	struct owner o = { .netns = sock_netns(sk) }; /* the socket's, not always its holder's */
	set_holder(&o, task);
	bpf_map_update_elem(&owners, &cookie, &o, BPF_NOEXIST);
}

/*
 * own_accepted gives an accepted socket that file holds the owner of task,
 * the process holding it, unless its entry has an owner of its own already.
 * A connecting socket (CONN_ACTIVE) is never one: its owner is the thread
 * that called connect(), which its SYN_SENT change records. A socket that
 * existed before start-up (CONN_PARTIAL, whose CONN_ACTIVE is a guess) has
 * no other owner to learn: it takes its holder's, whatever its kind, so
 * that no /proc is needed for it. The entry is keyed by the cookie its
 * ESTABLISHED change (or sock_diag, for those) generated, or by its address
 * (5.10, or a cookie generated later).
 */
static __always_inline void own_accepted(struct task_struct___conns *task, struct sock *sk)
{
	if (!sk)
		return;
	u64 key = BPF_CORE_READ(sk, __sk_common.skc_cookie.counter);
	struct conn *c = key ? bpf_map_lookup_elem(&conns, &key) : NULL;
	if (!c) {
		key = (u64)sk;
		c = bpf_map_lookup_elem(&conns, &key);
	}
	if (!c || c->sk != (u64)sk || (c->flags & CONN_OWNED) ||
	    (c->flags & (CONN_ACTIVE | CONN_PARTIAL)) == CONN_ACTIVE)
		return;
	set_holder(&c->owner, task);
	c->flags |= CONN_OWNED;
}

#endif /* CONNS_ACCEPT_H */
