/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What every hook shares: the contract with internal/latency (enums exported
 * by bpf2go -type), the configuration, the histograms and recording a sample.
 */
#ifndef LATENCY_RECORD_H
#define LATENCY_RECORD_H

#include "stacktop.h"

/*
 * The contract with internal/latency: bpf2go exports these enums (-type) and
 * the Go code is written against the generated names, so there is nothing
 * to keep in step by hand. An enum reaches the object's BTF only through a
 * map or struct declared with it, which is why the maps below name them.
 */

/* Hook ids, in stack order: the values of internal/latency.Hook. */
enum hook {
	HOOK_NIC,
	HOOK_IP_START,
	HOOK_TCP_START,
	HOOK_UDP_START,
	HOOK_TCP_SOCK_ENQUEUED,
	HOOK_UDP_SOCK_ENQUEUED,
	HOOK_TCP_SOCK_READ,
	HOOK_UDP_SOCK_READ,
	N_HOOKS,
};

/* Why a packet seen at a hook was or was not recorded (debug counters). */
enum reason {
	REASON_RECORDED,       /* never incremented: user space sums the histograms */
	REASON_NO_STAMP,       /* skb->tstamp == 0: timestamping was off when it arrived */
	REASON_FUTURE_STAMP,   /* stamp after now: clock stepped, or not an RX stamp */
	REASON_DELIVERY_TIME,  /* monotonic/TAI delivery time (locally generated TCP, EDT) */
	REASON_HIST_FULL,      /* no room for a new (hook, iface, cgroup, process) histogram */
	REASON_HOL_BLOCKED,    /* TCP read possibly delayed by head-of-line blocking, excluded */
	REASON_FIFO_FULL,      /* UDP read FIFO full: datagram enqueued but not tracked */
	REASON_READ_UNTRACKED, /* UDP read of a datagram the FIFO does not know */
	REASON_READ_WAIT_FULL, /* read wait: no room for the socket's histogram */
	REASON_NO_HW_STAMP,    /* nic: the NIC did not stamp it (shinfo hwtstamp 0) */
	REASON_NO_PHC,         /* nic: stamped, but its device's clock is not converted */
	N_REASONS,
};

#define MAX_SLOT 34 /* internal/hist.MaxSlot */
#define SUM_SLOT (MAX_SLOT + 1)

#define COMM_LEN 16 /* TASK_COMM_LEN */

/* pid and comm: the reading task's, at the socket-read hooks only (-P).
 * netns: the inode of the namespace the interface is in, only when grouping
 * by interface across namespaces (ifindexes repeat between namespaces). */
struct hist_key {
	__u64 cgroup;
	__u32 ifindex;
	__u16 hook;
	__u16 pad;
	__u32 pid;
	char comm[COMM_LEN];
	__u32 netns;
};

struct hist_value {
	__u64 slots[SUM_SLOT + 1];
};

/* Configuration, fixed at load time by user space. */
volatile const __u32 netns_inum = 0;    /* 0: every namespace */
volatile const __u32 min_queue_len = 0; /* 0: no queue-length filter */
volatile const bool filter_pid = false;
volatile const bool filter_ifindex = false;
volatile const bool filter_cgroup = false;
volatile const bool group_by_ifindex = false;
volatile const bool group_by_netns = false; /* with group_by_ifindex, several namespaces in scope */
/* filter_ifindex || group_by_ifindex || slow_ns: one load where the stamp is read. */
volatile const bool read_ifindex = false;
volatile const bool group_by_cgroup = false;
volatile const bool group_by_process = false;
volatile const bool include_hol_blocked = false;
/* --sample N: 0 records every packet; else a packet is recorded when a
 * random 32-bit number is below this, 2^32 / N (see sampled). */
volatile const __u32 sample_threshold = 0;
/* bpf_ktime_get_tai_ns exists (6.1+); else "now" is monotonic + offset. */
volatile const bool tai_clock = true;
/* The kernel refreshes a TCP socket's tcp_clock_cache at every copy of a
 * read (up to 6.18; checked at start-up, readclock.go): a TCP read's "now"
 * is that field, no clock read. */
volatile const bool tcp_read_clock = false;
/* Tracing programs may use sk_storage (5.11+); else a hash keyed by socket. */
volatile const bool sk_storage_in_tracing = true;

/*
 * Which backend records each hook (enum hook -> BACKEND_*), written by user
 * space once the hook's backend is chosen. Programs shared by several hooks
 * (the LOCAL_IN one serves tcp-start and udp-start) record only the hooks
 * that chose their backend, so another backend may take the others.
 */
enum backend {
	BACKEND_TRACEPOINT = 1,
	BACKEND_FENTRY = 2,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, N_HOOKS);
	__type(key, enum hook);
	__type(value, enum backend);
} hook_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024); /* resized by user space */
	__type(key, struct hist_key);
	__type(value, struct hist_value);
} hists SEC(".maps");

/*
 * The histograms when nothing is grouped, one per hook: found by index, not
 * by hashing a key and walking a bucket, on every recorded packet.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_HOOKS);
	__type(key, enum hook);
	__type(value, struct hist_value);
} hook_hists SEC(".maps");

/* Never written: the initial value of a new histogram (too big for the stack). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hist_value);
} empty_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_HOOKS * N_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* The clocks "now" is read from: each has its offset in clock_offset. */
enum clock {
	CLOCK_OF_HELPER,    /* bpf_ktime_get_tai_ns, or bpf_ktime_get_ns before 6.1 */
	CLOCK_OF_TCP_CACHE, /* a TCP socket's tcp_clock_cache (CLOCK_MONOTONIC) */
	N_CLOCKS,
};

/*
 * What turns each clock into CLOCK_REALTIME, in ns. CLOCK_OF_HELPER: with
 * tai_clock CLOCK_TAI - CLOCK_REALTIME from adjtimex (subtracted), else
 * CLOCK_REALTIME - CLOCK_MONOTONIC (added); CLOCK_OF_TCP_CACHE: the latter.
 * Refreshed by user space so a leap second, an NTP-set TAI offset or a
 * stepped clock does not skew every sample.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, N_CLOCKS);
	__type(key, enum clock);
	__type(value, __s64);
} clock_offset SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8);
} pid_filter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8);
} ifindex_filter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, __u8);
} cgroup_filter SEC(".maps");



/* A received skb as remembered between two tracepoints. */
struct stamp {
	__u64 skb;   /* address, only compared, never dereferenced */
	__s64 tstamp;
	__u32 ifindex;
	enum reason skip; /* why the stamp is unusable, else 0 */
};

#define IPV6_HOPOPTS 0
#define IPV6_ROUTING 43
#define IPV6_FRAGMENT 44
#define IPV6_DSTOPTS 60

/* hook_on: this hook chose the backend of the calling program. */
static __always_inline bool hook_on(__u32 hook, __u32 backend)
{
	__u32 *chosen = bpf_map_lookup_elem(&hook_backends, &hook);

	return chosen && *chosen == backend;
}

static __always_inline bool hook_enabled(__u32 hook)
{
	return hook_on(hook, BACKEND_TRACEPOINT);
}

/*
 * sampled decides, with --sample N, whether to record a packet (a read, at
 * the socket-read probes): with probability 1/N, before anything about it
 * is read, so a packet left out costs a random number. Random, not every
 * Nth: traffic is often periodic (a request, its ACK, the next request),
 * and a counter would pick the same kind of packet every time. Without
 * --sample the verifier removes the call.
 */
static __always_inline bool sampled(void)
{
	return !sample_threshold || bpf_get_prandom_u32() < sample_threshold;
}

static __always_inline void count(__u32 hook, __u32 reason)
{
	__u32 key = hook * N_REASONS + reason;
	__u64 *v = bpf_map_lookup_elem(&counters, &key);

	if (v)
		(*v)++;
}

static __always_inline __s64 clock_offset_of(enum clock c)
{
	__s64 *off = bpf_map_lookup_elem(&clock_offset, &c);

	return off ? *off : 0;
}

static __always_inline __s64 realtime_now(void)
{
	__s64 offset = clock_offset_of(CLOCK_OF_HELPER);

	/* The verifier drops the branch not taken, so kernels without the
	 * TAI helper never see the call. */
	if (tai_clock)
		return bpf_ktime_get_tai_ns() - offset;
	return bpf_ktime_get_ns() + offset;
}

/*
 * read_now is "now" for a read of sk recorded at hook, in the reading task:
 * for a TCP read with tcp_read_clock, the time of the read's last copy,
 * which tcp_recvmsg has just written to a line of the socket it holds —
 * 64-512 ns before the read returns (docs/LATENCY.md, "A TCP read without a
 * clock read"): a clock read less per read, ~44 ns here. A TCP read's sk is
 * the tcp_sock record_tcp_read got from bpf_skc_to_tcp_sock, through which
 * alone the verifier lets a load past struct sock go (it refuses a program
 * that passes another pointer here).
 */
static __always_inline __s64 read_now(__u32 hook, const struct sock *sk)
{
	if (tcp_read_clock && hook == HOOK_TCP_SOCK_READ)
		return ((const struct tcp_sock *)sk)->tcp_clock_cache + clock_offset_of(CLOCK_OF_TCP_CACHE);
	return realtime_now();
}

/*
 * One step of a branchless log2: k if v >> k is non-zero (v < 2^(2k), so
 * (v >> k) + 2^k - 1 carries into bit k exactly then), else 0.
 */
#define LOG2_STEP(v, k) ((((v) >> (k)) + ((1ULL << (k)) - 1)) >> (k) << LOG2_##k)
#define LOG2_32 5
#define LOG2_16 4
#define LOG2_8 3
#define LOG2_4 2
#define LOG2_2 1

/*
 * hist.Slot: 0 for 0..1 ns, i for (2^(i-1), 2^i], clamped to MAX_SLOT.
 * Without a branch per bit: latencies vary, so those mispredicted, and each
 * multiplied the states the verifier walks in every inlined copy.
 */
static __always_inline __u32 slot_of(__u64 v)
{
	__u64 r = 0, s;

	if (v <= 1)
		return 0;
	v--;
	s = LOG2_STEP(v, 32); v >>= s; r += s;
	s = LOG2_STEP(v, 16); v >>= s; r += s;
	s = LOG2_STEP(v, 8); v >>= s; r += s;
	s = LOG2_STEP(v, 4); v >>= s; r += s;
	s = LOG2_STEP(v, 2); v >>= s; r += s;
	r += (v >> 1) + 1;
	return r > MAX_SLOT ? MAX_SLOT : r;
}

static __always_inline __u32 sk_netns(const struct sock *sk)
{
	return sk->__sk_common.skc_net.net->ns.inum;
}

/* The namespace of the device an skb arrived on, for hooks without a socket. */
static __always_inline __u32 skb_netns(struct sk_buff *skb)
{
	return skb->dev->nd_net.net->ns.inum;
}

/*
 * grouped_hist_of finds, or makes, the histogram a sample of hook belongs to
 * when grouping (the ungrouped ones are in hook_hists, by hook). in_task:
 * the hook runs in the reading task's context (socket reads); elsewhere the
 * current task is whoever softirq processing interrupted, so the process
 * stays 0 there.
 */
static __always_inline struct hist_value *grouped_hist_of(__u32 hook, const struct stamp *s, __u64 cgroup,
							  const struct sock *sk, struct sk_buff *skb, bool in_task)
{
	struct hist_key key = { .hook = hook };
	struct hist_value *h, *empty;
	__u32 zero = 0;

	if (group_by_ifindex)
		key.ifindex = s->ifindex;
	/* Each pointer tested on its own: the 5.10 and 6.1 verifiers do not
	 * take a traced function's socket argument to be non-NULL and follow
	 * sk == NULL too, where "sk ? sk_netns(sk) : skb_netns(skb)" read
	 * through the NULL skb the socket hooks pass ("R1 invalid mem access";
	 * 7.2's verifier and this host's 6.18 accepted it). */
	if (group_by_netns) {
		if (sk)
			key.netns = sk_netns(sk);
		else if (skb)
			key.netns = skb_netns(skb);
	}
	if (group_by_cgroup)
		key.cgroup = cgroup;
	if (group_by_process && in_task) {
		key.pid = bpf_get_current_pid_tgid() >> 32;
		bpf_get_current_comm(key.comm, sizeof(key.comm));
	}
	h = bpf_map_lookup_elem(&hists, &key);
	if (h)
		return h;
	empty = bpf_map_lookup_elem(&empty_hist, &zero);
	if (!empty)
		return NULL;
	bpf_map_update_elem(&hists, &key, empty, BPF_NOEXIST);
	h = bpf_map_lookup_elem(&hists, &key);
	if (!h)
		count(hook, REASON_HIST_FULL);
	return h;
}

/*
 * record_until records the time from s's stamp until now (both
 * CLOCK_REALTIME, ns) and returns it (for --slow), or -1 when it has none.
 * sk, else skb: where the sample's namespace is read from, only when
 * group_by_netns (the socket's, or without one the skb's device's): read
 * there, the namespace costs the other configurations nothing.
 */
static __always_inline __s64 record_until(__u32 hook, __s64 now, const struct stamp *s, __u64 cgroup,
					  const struct sock *sk, struct sk_buff *skb, bool in_task)
{
	struct hist_value *h;
	__s64 lat;

	if (s->tstamp > now) {
		count(hook, REASON_FUTURE_STAMP);
		return -1;
	}
	lat = now - s->tstamp;
	if (!group_by_ifindex && !group_by_cgroup && !group_by_process)
		h = bpf_map_lookup_elem(&hook_hists, &hook);
	else
		h = grouped_hist_of(hook, s, cgroup, sk, skb, in_task);
	if (!h)
		return lat;
	/* No REASON_RECORDED increment: the histogram's buckets count the
	 * samples, and user space sums them, one per-CPU line fewer. */
	h->slots[slot_of(lat)]++;
	h->slots[SUM_SLOT] += lat;
	return lat;
}

/* record records the time from s's stamp until now, as record_until. */
static __always_inline __s64 record(__u32 hook, const struct stamp *s, __u64 cgroup, const struct sock *sk,
				   struct sk_buff *skb, bool in_task)
{
	if (s->skip) {
		count(hook, s->skip);
		return -1;
	}
	return record_until(hook, in_task ? read_now(hook, sk) : realtime_now(), s, cgroup, sk, skb, in_task);
}

/*
 * read_stamp captures what an skb carries: its RX stamp and interface, or why
 * the stamp cannot be used. A delivery time (set by the sender for pacing,
 * kept across veth/loopback until ip_local_deliver_finish) is monotonic or
 * TAI, not an RX stamp: 6.11+ says so in tstamp_type, 5.18-6.10 in
 * mono_delivery_time.
 */
static __always_inline bool delivery_time(struct sk_buff *skb)
{
	if (bpf_core_field_exists(skb->tstamp_type))
		return BPF_CORE_READ_BITFIELD(skb, tstamp_type);
	if (bpf_core_field_exists(skb->mono_delivery_time))
		return BPF_CORE_READ_BITFIELD(skb, mono_delivery_time);
	return false;
}

/* The interface is read only when something filters, groups or reports it. */
static __always_inline void read_stamp(struct sk_buff *skb, struct stamp *s)
{
	s->skb = (__u64)skb;
	s->tstamp = skb->tstamp;
	s->ifindex = read_ifindex ? skb->skb_iif : 0;
	s->skip = 0;
	if (delivery_time(skb))
		s->skip = REASON_DELIVERY_TIME;
	else if (s->tstamp <= 0)
		s->skip = REASON_NO_STAMP;
}

static __always_inline bool ifindex_allowed(__u32 ifindex)
{
	return !filter_ifindex || bpf_map_lookup_elem(&ifindex_filter, &ifindex);
}

static __always_inline bool netns_allowed(__u32 inum)
{
	return !netns_inum || inum == netns_inum;
}

#endif /* LATENCY_RECORD_H */
