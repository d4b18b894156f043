/* SPDX-License-Identifier: GPL-2.0 */
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

/*
 * file_tcp_sock returns the TCP socket that file holds: its own or, for an
 * MPTCP socket, its first subflow, which is the TCP socket that the state
 * changes, sock_diag and the table know. Go's listeners are MPTCP by
 * default (since Go 1.24) wherever the kernel has MPTCP. The pointer is
 * only compared and read through, never dereferenced directly.
 */
static __always_inline struct sock *file_tcp_sock(struct file *file)
{
	struct socket *sock = bpf_sock_from_file(file);
	struct sock *sk = sock ? sock->sk : NULL;
	if (!sk || sk->sk_protocol != IPPROTO_MPTCP)
		return sk;
	if (!bpf_core_type_exists(struct mptcp_sock))
		return NULL;
	return BPF_CORE_READ((struct mptcp_sock *)sk, first);
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
static __always_inline void own_accepted(struct task_struct___conns *task, struct file *file)
{
	struct sock *sk = file_tcp_sock(file);
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
	c->owner.pid = task->tgid;
	c->owner.cgroup_id = task->cgroups->dfl_cgrp->kn->id;
	__builtin_memcpy(c->owner.comm, task->group_leader->comm, sizeof(c->owner.comm));
	c->flags |= CONN_OWNED;
}

#endif /* CONNS_ACCEPT_H */
