/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Read wait per socket: each socket-read sample also goes into a small log2
 * histogram of its socket, which user space joins to the connection table
 * by socket cookie (stream/top --read-wait, serve --collector.read-wait).
 */
#ifndef LATENCY_READWAIT_H
#define LATENCY_READWAIT_H

#include "record.h"

/*
 * Off (the default) the verifier removes every use: `latency` alone pays
 * nothing but the constant's load and a branch never taken per read.
 */
volatile const bool read_wait = false;
/* Tracing programs may call bpf_get_socket_cookie since 5.12; before, see
 * read_wait_key. */
volatile const bool read_wait_cookie_helper = true;

/*
 * internal/hist's buckets 10..34 (bucket 0 here holds everything up to
 * 2^10 ns = 1.024 us): read waits below a microsecond need no resolution.
 */
#define RW_FIRST_SLOT 10
#define RW_SLOTS (MAX_SLOT - RW_FIRST_SLOT + 1)

/*
 * One socket's reads. Counts are cumulative and wrap (user space subtracts
 * the previous refresh's, modulo 2^32). The largest sample is kept per
 * refresh without a write per entry from user space: user space bumps
 * read_wait_epoch once per refresh, and the first sample of a new epoch
 * moves max_cur to max_prev (when it belongs to the epoch just before) and
 * starts afresh. 128 bytes.
 */
struct read_wait {
	__u32 slots[RW_SLOTS];
	__u32 epoch;   /* the epoch max_cur belongs to */
	__u64 sum_ns;
	__u64 max_cur; /* largest sample of epoch `epoch`, ns */
	__u64 max_prev; /* largest sample of epoch `epoch - 1`, ns */
};

/*
 * A socket's cookie, the key of conntrack's tables, with sk_id 0. Before
 * 5.12 tracing programs cannot make a cookie, and conntrack keys a TCP
 * socket by its address unless it had a cookie at its first state change:
 * TCP is keyed by address then (user space joins it through the address
 * and identity conntrack's entry keeps), UDP by the cookie conntrack's
 * cgroup/sock_create program made at socket(), else by address. An address
 * comes with the socket's sock_identity(): a socket that reuses a freed
 * one's memory has an entry of its own, so that user space, forgetting the
 * freed one's, cannot delete the new one's reads with it.
 */
struct read_wait_key {
	__u64 socket; /* cookie or address */
	__u32 sk_id;
	__u32 pad;
};

/*
 * A hash, not an LRU: a full table counts the samples it cannot hold
 * (read_wait_full) rather than silently evicting a live socket's history;
 * user space deletes the entries of sockets that are gone. Sized by user
 * space (1 when read wait is off).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct read_wait_key);
	__type(value, struct read_wait);
} read_waits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} read_wait_epoch SEC(".maps");

/* read_wait_key is the socket's key in read_waits (see there). */
static __always_inline struct read_wait_key read_wait_key(struct sock *sk)
{
	struct read_wait_key k = {};

	if (read_wait_cookie_helper) {
		k.socket = bpf_get_socket_cookie(sk);
		return k;
	}
	if (sk->sk_protocol != IPPROTO_TCP)
		k.socket = sk->__sk_common.skc_cookie.counter;
	if (!k.socket) {
		k.socket = (__u64)sk;
		k.sk_id = sock_identity(&sk->__sk_common);
	}
	return k;
}

/* read_wait_add adds a socket-read sample of hook to sk's histogram. */
static __always_inline void read_wait_add(__u32 hook, struct sock *sk, __s64 lat)
{
	struct read_wait *v, fresh = {};
	struct read_wait_key key = read_wait_key(sk);
	__u32 zero = 0, epoch;
	__u64 slot;
	__u32 *e = bpf_map_lookup_elem(&read_wait_epoch, &zero);
	long err;

	epoch = e ? *e : 0;
	v = bpf_map_lookup_elem(&read_waits, &key);
	if (!v) {
		fresh.epoch = epoch;
		err = bpf_map_update_elem(&read_waits, &key, &fresh, BPF_NOEXIST);
		if (err && err != -EEXIST) {
			count(hook, REASON_READ_WAIT_FULL);
			return;
		}
		v = bpf_map_lookup_elem(&read_waits, &key);
		if (!v)
			return;
	}
	/* ceil(lat / 2^10) lies in (2^(j-1), 2^j] exactly when lat lies in
	 * (2^(j+9), 2^(j+10)]: hist.Slot of it is the bucket. (A subtraction
	 * from slot_of(lat) is turned into arithmetic the verifier cannot
	 * bound.) */
	slot = slot_of(((__u64)lat + (1 << RW_FIRST_SLOT) - 1) >> RW_FIRST_SLOT);
	if (slot >= RW_SLOTS)
		slot = RW_SLOTS - 1;
	/* The bound checked in the register that indexes, not in a copy. */
	asm volatile("" : "+r"(slot));
	/* Threads of one process may read one (UDP) socket on several CPUs at
	 * once: the counts are atomic, so read_wait_samples stays exact. */
	__sync_fetch_and_add(&v->slots[slot], 1);
	__sync_fetch_and_add(&v->sum_ns, lat);
	/* The max may lose a race between two CPUs: it is only a max. */
	if (v->epoch != epoch) {
		v->max_prev = v->epoch + 1 == epoch ? v->max_cur : 0;
		v->max_cur = 0;
		v->epoch = epoch;
	}
	if ((__u64)lat > v->max_cur)
		v->max_cur = lat;
}

#endif /* LATENCY_READWAIT_H */
