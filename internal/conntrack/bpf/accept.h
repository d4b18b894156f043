/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Accepted sockets' owners: the task that accepted each one.
 */
#ifndef CONNS_ACCEPT_H
#define CONNS_ACCEPT_H

#include "conns.h"

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
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

#pragma clang attribute pop

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

#endif /* CONNS_ACCEPT_H */
