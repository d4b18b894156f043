// SPDX-License-Identifier: GPL-2.0
/*
 * netstacklat: how long received packets have been inside the host network
 * stack when they reach each layer, aggregated into per-CPU log2 histograms
 * (ebpf_exporter exp2 semantics) in the kernel. Two backends implement the
 * hooks: fentry/fexit programs at netstacklat's own attachment points, and
 * netfilter + tp_btf programs for kernels that refuse fentry. Both feed the
 * same recording code, so filters and grouping mean the same on either.
 *
 * latency = realtime now - skb->tstamp, where skb->tstamp is the RX software
 * timestamp (CLOCK_REALTIME) taken at netif_receive_skb/netif_rx while user
 * space holds a socket with SOF_TIMESTAMPING_RX_SOFTWARE open.
 */
#include "stacktop.h"

char LICENSE[] SEC("license") = "GPL";

/*
 * The contract with internal/latency: bpf2go exports these enums (-type) and
 * the Go code is written against the generated names, so there is nothing
 * to keep in step by hand. An enum reaches the object's BTF only through a
 * map or struct declared with it, which is why the maps below name them.
 */

/* Hook ids, in stack order: the values of internal/latency.Hook. */
enum hook {
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
/* bpf_ktime_get_tai_ns exists (6.1+); else "now" is monotonic + offset. */
volatile const bool tai_clock = true;
/* Tracing programs may use sk_storage (5.11+); else a hash keyed by socket. */
volatile const bool sk_storage_in_tracing = true;

/*
 * --slow: each packet whose latency at a hook exceeds slow_ns is reported on
 * its own through slow_events. At 0 (no --slow) the verifier knows the
 * constant and removes the code it guards: what stays is one load of it and
 * a branch never taken per sample.
 */
volatile const __u64 slow_ns = 0;
volatile const __u32 slow_limit = 0; /* events per second, 0: no limit */

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

/*
 * With tai_clock: CLOCK_TAI - CLOCK_REALTIME in ns, from adjtimex. Without
 * (no bpf_ktime_get_tai_ns before 6.1): CLOCK_REALTIME - CLOCK_MONOTONIC.
 * Refreshed by user space so a leap second, an NTP-set TAI offset or a
 * stepped clock does not skew every sample.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
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

/*
 * One packet slower than slow_ns at a hook. Addresses and ports are this
 * host's end (local) and the peer's (remote), IPv4 in the first 4 bytes.
 * pid, comm and cgroup are the reading task's, at the socket-read hooks only.
 */
struct slow_event {
	__s64 ts;      /* CLOCK_REALTIME ns when the hook saw the packet */
	__u64 latency; /* ns */
	__u64 cgroup;
	__u8 local_addr[16];
	__u8 remote_addr[16];
	__u32 netns;
	__u32 ifindex;
	__u32 pid;
	__u16 local_port;
	__u16 remote_port;
	__u16 hook;
	__u8 family; /* AF_INET, AF_INET6; 0: the addresses are unknown */
	__u8 proto;  /* IPPROTO_*; 0: unknown */
	char comm[COMM_LEN];
};

/* Never read: puts struct slow_event in the object's BTF for bpf2go -type. */
const struct slow_event *const slow_event_type = NULL;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096); /* resized by user space */
} slow_events SEC(".maps");

/* Why a slow packet was not reported: every one is counted. */
enum slow_drop {
	SLOW_RING_FULL, /* user space did not keep up */
	SLOW_LIMITED,   /* over slow_limit in this second */
	N_SLOW_DROPS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_SLOW_DROPS);
	__type(key, __u32);
	__type(value, __u64);
} slow_drops SEC(".maps");

/* The events sent in the current second, shared by every CPU (slow_limit). */
struct slow_budget {
	__u64 second;
	__u64 sent;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct slow_budget);
} slow_budgets SEC(".maps");

/* A received skb as remembered between two tracepoints. */
struct stamp {
	__u64 skb;   /* address, only compared, never dereferenced */
	__s64 tstamp;
	__u32 ifindex;
	enum reason skip; /* why the stamp is unusable, else 0 */
};

/*
 * tcp-socket-read: the newest stamp a recvmsg copied, kept per CPU until the
 * same task's sock_recv_length on that CPU takes it. Per CPU rather than in
 * task storage, which cost ~55 ns more per copied skb here: the read is lost only
 * when its task is preempted in between by another TCP reader on that CPU,
 * or migrates (see docs/LATENCY.md).
 */
struct pending_read {
	__u64 task;  /* address, only compared */
	__u64 sk;
	struct stamp s;
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

static __always_inline void count(__u32 hook, __u32 reason)
{
	__u32 key = hook * N_REASONS + reason;
	__u64 *v = bpf_map_lookup_elem(&counters, &key);

	if (v)
		(*v)++;
}

static __always_inline __s64 realtime_now(void)
{
	__u32 key = 0;
	__s64 *off = bpf_map_lookup_elem(&clock_offset, &key);
	__s64 offset = off ? *off : 0;

	/* The verifier drops the branch not taken, so kernels without the
	 * TAI helper never see the call. */
	if (tai_clock)
		return bpf_ktime_get_tai_ns() - offset;
	return bpf_ktime_get_ns() + offset;
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
 * record returns the sample's latency (for --slow), or -1 when it has none.
 * sk, else skb: where the sample's namespace is read from, only when
 * group_by_netns (the socket's, or without one the skb's device's): read
 * there, the namespace costs the other configurations nothing.
 */
static __always_inline __s64 record(__u32 hook, const struct stamp *s, __u64 cgroup, const struct sock *sk,
				   struct sk_buff *skb, bool in_task)
{
	struct hist_value *h;
	__s64 now, lat;

	if (s->skip) {
		count(hook, s->skip);
		return -1;
	}
	now = realtime_now();
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

/* ---- --slow: one event per packet over the threshold ---- */

#define IPV6_HOPOPTS 0
#define IPV6_ROUTING 43
#define IPV6_FRAGMENT 44
#define IPV6_DSTOPTS 60

static __always_inline void count_slow_drop(__u32 why)
{
	__u64 *v = bpf_map_lookup_elem(&slow_drops, &why);

	if (v)
		(*v)++;
}

/*
 * slow_budget_left takes one of this second's slow_limit events. CPUs race
 * only at the limit: each may send one more than the budget (an atomic
 * fetch-and-add would need 5.12), and a second's first events may reset the
 * count twice.
 */
static __always_inline bool slow_budget_left(__s64 now)
{
	__u64 second = (__u64)now / 1000000000ULL;
	struct slow_budget *b;
	__u32 zero = 0;

	if (!slow_limit)
		return true;
	b = bpf_map_lookup_elem(&slow_budgets, &zero);
	if (!b)
		return false;
	if (b->second != second) {
		b->second = second;
		b->sent = 0;
	}
	if (b->sent >= slow_limit)
		return false;
	__sync_fetch_and_add(&b->sent, 1);
	return true;
}

/* The socket's addresses: the connection's, or only the local end of an
 * unconnected UDP socket. */
static __always_inline void sock_tuple(struct slow_event *e, const struct sock *sk)
{
	const struct sock_common *c = &sk->__sk_common;

	e->proto = sk->sk_protocol;
	e->local_port = c->skc_num;
	e->remote_port = bpf_ntohs(c->skc_dport);
	if (c->skc_family == AF_INET) {
		e->family = AF_INET;
		*(__be32 *)e->local_addr = c->skc_rcv_saddr;
		*(__be32 *)e->remote_addr = c->skc_daddr;
	} else if (c->skc_family == AF_INET6) {
		e->family = AF_INET6;
		bpf_probe_read_kernel(e->local_addr, 16, __builtin_preserve_access_index(&c->skc_v6_rcv_saddr));
		bpf_probe_read_kernel(e->remote_addr, 16, __builtin_preserve_access_index(&c->skc_v6_daddr));
	}
}

/* The headers as they are on the wire, not kernel types: no relocation. */
struct ipv4_header {
	__u8 version_ihl;
	__u8 tos;
	__be16 len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__be16 check;
	__be32 saddr;
	__be32 daddr;
};

struct ipv6_header {
	__be32 version_flow;
	__be16 len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* skb->tail: the end of the linear data, an offset from head on 64-bit. */
struct sk_buff___tail {
	unsigned int tail;
} __attribute__((preserve_access_index));

#define IPV4_FRAG_OFFSET 0x1fff

/*
 * The addresses and ports of a received packet, from its headers; the
 * ports only when the transport header is in the linear data already (at
 * ip-start it may not be) and the packet is not a later fragment.
 */
static __always_inline void skb_tuple(struct slow_event *e, struct sk_buff *skb)
{
	__u32 nh_off = skb->network_header;
	__u32 end = ((struct sk_buff___tail *)skb)->tail;
	unsigned char *nh = skb->head + nh_off;
	struct ipv4_header ip;
	struct ipv6_header ip6;
	__u16 ports[2];
	__u8 version, ext[2];
	__u32 off;

	if (bpf_probe_read_kernel(&version, 1, nh))
		return;
	version >>= 4;
	if (version == 4) {
		if (bpf_probe_read_kernel(&ip, sizeof(ip), nh))
			return;
		e->family = AF_INET;
		e->proto = ip.protocol;
		*(__be32 *)e->local_addr = ip.daddr;
		*(__be32 *)e->remote_addr = ip.saddr;
		if (ip.frag_off & bpf_htons(IPV4_FRAG_OFFSET))
			return;
		off = (ip.version_ihl & 0xf) * 4;
	} else if (version == 6) {
		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), nh))
			return;
		e->family = AF_INET6;
		__builtin_memcpy(e->local_addr, ip6.daddr, 16);
		__builtin_memcpy(e->remote_addr, ip6.saddr, 16);
		e->proto = ip6.nexthdr;
		off = sizeof(ip6);
		/* As l4_protocol; a fragment header ends the walk, without ports. */
		for (int i = 0; i < 3; i++) {
			if (e->proto != IPV6_HOPOPTS && e->proto != IPV6_ROUTING && e->proto != IPV6_DSTOPTS)
				break;
			if (bpf_probe_read_kernel(ext, 2, nh + off))
				return;
			off += (ext[1] + 1) * 8;
			e->proto = ext[0];
		}
	} else {
		return;
	}
	if (e->proto != IPPROTO_TCP && e->proto != IPPROTO_UDP)
		return;
	if (nh_off + off + sizeof(ports) > end || bpf_probe_read_kernel(ports, sizeof(ports), nh + off))
		return;
	e->remote_port = bpf_ntohs(ports[0]);
	e->local_port = bpf_ntohs(ports[1]);
}

/*
 * report_slow sends an event when a sample's latency exceeds --slow. sk is
 * the socket at socket hooks, skb the packet at hooks that have it: the
 * socket names the connection, the packet the peer of an unconnected UDP
 * socket. in_task: the hook runs in the reading task (socket reads).
 */
static __always_inline void report_slow(__u32 hook, __s64 lat, const struct stamp *s, const struct sock *sk,
					struct sk_buff *skb, bool in_task)
{
	struct slow_event *e;

	if (!slow_ns || lat <= (__s64)slow_ns)
		return;
	if (!slow_budget_left(s->tstamp + lat)) {
		count_slow_drop(SLOW_LIMITED);
		return;
	}
	e = bpf_ringbuf_reserve(&slow_events, sizeof(*e), 0);
	if (!e) {
		count_slow_drop(SLOW_RING_FULL);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = s->tstamp + lat;
	e->latency = lat;
	e->hook = hook;
	e->ifindex = s->ifindex;
	if (sk && (sk->__sk_common.skc_dport || !skb))
		sock_tuple(e, sk);
	else if (skb)
		skb_tuple(e, skb);
	if (sk)
		e->netns = sk_netns(sk);
	else if (skb)
		e->netns = skb_netns(skb);
	if (in_task) {
		e->pid = bpf_get_current_pid_tgid() >> 32;
		e->cgroup = bpf_get_current_cgroup_id();
		bpf_get_current_comm(e->comm, sizeof(e->comm));
	}
	bpf_ringbuf_submit(e, 0);
}

/*
 * Hooks that see an skb on its way in: ip-start, tcp/udp-start, enqueued.
 * The caller has applied the namespace filter (netfilter programs need
 * none: their links exist only in the namespaces in scope).
 */
static __always_inline void record_skb(__u32 hook, struct sk_buff *skb, const struct sock *sk)
{
	struct stamp s;

	read_stamp(skb, &s);
	if (ifindex_allowed(s.ifindex))
		report_slow(hook, record(hook, &s, 0, NULL, skb, false), &s, sk, skb, false);
}

/* ---- netfilter: ip-start (PRE_ROUTING), tcp-start/udp-start (LOCAL_IN) ---- */

/* Attached only for ip-start on this backend: no hook_backends check. */
SEC("netfilter")
int nf_ip_start(struct bpf_nf_ctx *ctx)
{
	record_skb(HOOK_IP_START, ctx->skb, NULL);
	return NF_ACCEPT;
}

struct iphdr {
	__u8 protocol;
} __attribute__((preserve_access_index));

struct ipv6hdr {
	__u8 nexthdr;
} __attribute__((preserve_access_index));

/*
 * The verifier turns this kfunc into a plain move: loads through its result
 * are fault-safe direct loads, where bpf_probe_read_kernel is a helper call
 * (~20 ns per packet here). 6.2+; netfilter programs need 6.4 anyway.
 */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

/* l4_protocol returns the transport protocol of an IPv4/IPv6 packet at LOCAL_IN. */
static __always_inline __u8 l4_protocol(struct sk_buff *skb, __u8 pf)
{
	unsigned char *nh = skb->head + skb->network_header;
	struct ipv6hdr *ip6;
	struct iphdr *ip;
	__u8 proto, ext[2];
	__u32 off;

	if (pf == NFPROTO_IPV4) {
		ip = bpf_rdonly_cast(nh, bpf_core_type_id_kernel(struct iphdr));
		return ip->protocol;
	}
	ip6 = bpf_rdonly_cast(nh, bpf_core_type_id_kernel(struct ipv6hdr));
	proto = ip6->nexthdr;
	off = 40;
	/* Extension headers are parsed after LOCAL_IN; skip the common ones. */
	for (int i = 0; i < 4; i++) {
		if (proto != IPV6_HOPOPTS && proto != IPV6_ROUTING && proto != IPV6_DSTOPTS &&
		    proto != IPV6_FRAGMENT)
			break;
		if (bpf_probe_read_kernel(ext, 2, nh + off))
			return 0;
		off += proto == IPV6_FRAGMENT ? 8 : (ext[1] + 1) * 8;
		proto = ext[0];
	}
	return proto;
}

SEC("netfilter")
int nf_l4_start(struct bpf_nf_ctx *ctx)
{
	const struct nf_hook_state *state = ctx->state;
	struct sk_buff *skb = ctx->skb;
	__u32 hook;

	switch (l4_protocol(skb, state->pf)) {
	case IPPROTO_TCP:
		hook = HOOK_TCP_START;
		break;
	case IPPROTO_UDP:
		hook = HOOK_UDP_START;
		break;
	default:
		return NF_ACCEPT;
	}
	if (hook_enabled(hook))
		record_skb(hook, skb, NULL);
	return NF_ACCEPT;
}

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

static __always_inline void record_read(__u32 hook, const struct sock *sk, const struct stamp *s)
{
	__u64 cgroup = 0;

	if (!queue_long_enough(sk, hook == HOOK_UDP_SOCK_READ))
		return;
	if (filter_pid) {
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;

		if (!bpf_map_lookup_elem(&pid_filter, &tgid))
			return;
	}
	if (filter_cgroup || group_by_cgroup)
		cgroup = bpf_get_current_cgroup_id();
	if (filter_cgroup && !bpf_map_lookup_elem(&cgroup_filter, &cgroup))
		return;
	if (!ifindex_allowed(s->ifindex) || !netns_allowed(sk_netns(sk)))
		return;
	report_slow(hook, record(hook, s, cgroup, sk, NULL, true), s, sk, NULL, true);
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
	if (ifindex_allowed(s.ifindex) && netns_allowed(sk_netns(sk)))
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

static __always_inline void udp_enqueued(struct sock *sk, struct sk_buff *tail, void *sentinel)
{
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
		if ((void *)skb == sentinel || !skb)
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
		if (hook_enabled(HOOK_UDP_SOCK_ENQUEUED) && ifindex_allowed(fresh[i].ifindex) &&
		    netns_allowed(sk_netns(sk)))
			report_slow(HOOK_UDP_SOCK_ENQUEUED, record(HOOK_UDP_SOCK_ENQUEUED, &fresh[i], 0, sk, NULL, false),
				    &fresh[i], sk, NULL, false);
		if (hook_enabled(HOOK_UDP_SOCK_READ))
			fifo_push(f, &fresh[i]);
	}
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(tp_sk_data_ready, struct sock *sk)
{
	void *queue = __builtin_preserve_access_index(&sk->sk_receive_queue);
	struct sk_buff *tail = sk->sk_receive_queue.prev;
	__u16 proto = sk->sk_protocol;
	__u16 type = sk->sk_type;

	if ((void *)tail == queue || !tail)
		return 0;
	if (proto == IPPROTO_TCP && type == SOCK_STREAM && hook_enabled(HOOK_TCP_SOCK_ENQUEUED))
		tcp_enqueued(sk, tail);
	else if (proto == IPPROTO_UDP && type == SOCK_DGRAM &&
		 (hook_enabled(HOOK_UDP_SOCK_ENQUEUED) || hook_enabled(HOOK_UDP_SOCK_READ)))
		udp_enqueued(sk, tail, queue);
	return 0;
}

/* ---- tcp-socket-read: skb_copy_datagram_iovec, then sock_recv_length ---- */

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(tp_skb_copy_datagram_iovec, struct sk_buff *skb, int len)
{
	struct sock *sk = skb->sk;
	struct pending_read *p;
	__u32 zero = 0;

	/* Attached only for tcp-socket-read: no hook_backends check. */
	if (!sk || sk->sk_protocol != IPPROTO_TCP)
		return 0;
	p = bpf_map_lookup_elem(&tcp_reads, &zero);
	if (!p)
		return 0;
	/* The queue is in arrival order: the last skb copied is the newest,
	 * the one tcp_recv_timestamp reports. */
	p->task = bpf_get_current_task();
	p->sk = (__u64)sk;
	read_stamp(skb, &p->s);
	return 0;
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
static __always_inline bool tcp_maybe_hol_blocked(struct sock *sk)
{
	/* The helper's result is a tcp_sock the verifier lets us load from
	 * directly; a cast of sk would stop at struct sock. */
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct tcp_state *st;
	__u32 ooo;

	if (!tp)
		return false;
	ooo = tp->rcv_ooopack;
	if (ooo == 0)
		return false;
	st = tcp_state_of(sk);
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

/* A TCP read that returned data; s is the newest stamp it copied. */
static __always_inline void record_tcp_read(struct sock *sk, const struct stamp *s)
{
	if (!include_hol_blocked && tcp_maybe_hol_blocked(sk)) {
		count(HOOK_TCP_SOCK_READ, REASON_HOL_BLOCKED);
		return;
	}
	record_read(HOOK_TCP_SOCK_READ, sk, s);
}

static __always_inline void tcp_read(struct sock *sk, int ret)
{
	struct pending_read *p;
	struct stamp s;
	__u32 zero = 0;

	p = bpf_map_lookup_elem(&tcp_reads, &zero);
	if (!p || p->sk != (__u64)sk || p->task != bpf_get_current_task())
		return;
	s = p->s;
	p->sk = 0;
	if (ret > 0)
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
	if (!f)
		return;
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
	if (ret >= 0)
		record_read(HOOK_UDP_SOCK_READ, sk, &s);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(tp_sock_recv_length, struct sock *sk, int ret, int flags)
{
	__u16 proto = sk->sk_protocol;

	if (flags & MSG_ERRQUEUE)
		return 0;
	if (proto == IPPROTO_TCP && hook_enabled(HOOK_TCP_SOCK_READ))
		tcp_read(sk, ret);
	else if (proto == IPPROTO_UDP && hook_enabled(HOOK_UDP_SOCK_READ) && !(flags & MSG_PEEK))
		udp_read(sk, ret);
	return 0;
}

/* ---- fentry/fexit backend: netstacklat's attachment points ---- */

/* ip-start, tcp-start, udp-start: the skb entering IP, TCP or UDP. */
#define FENTRY_SKB(func, hook)                                                  \
	SEC("fentry/" #func)                                                    \
	int BPF_PROG(fentry_##func, struct sk_buff *skb)                        \
	{                                                                       \
		if (hook_on(hook, BACKEND_FENTRY) && netns_allowed(skb_netns(skb))) \
			record_skb(hook, skb, NULL);                            \
		return 0;                                                       \
	}

FENTRY_SKB(ip_rcv_core, HOOK_IP_START)
FENTRY_SKB(ip6_rcv_core, HOOK_IP_START)
FENTRY_SKB(tcp_v4_rcv, HOOK_TCP_START)
FENTRY_SKB(tcp_v6_rcv, HOOK_TCP_START)
FENTRY_SKB(udp_rcv, HOOK_UDP_START)
FENTRY_SKB(udpv6_rcv, HOOK_UDP_START)

SEC("fexit/tcp_queue_rcv")
int BPF_PROG(fexit_tcp_queue_rcv, struct sock *sk, struct sk_buff *skb)
{
	if (hook_on(HOOK_TCP_SOCK_ENQUEUED, BACKEND_FENTRY) && netns_allowed(sk_netns(sk)))
		record_skb(HOOK_TCP_SOCK_ENQUEUED, skb, sk);
	return 0;
}

SEC("fexit/__udp_enqueue_schedule_skb")
int BPF_PROG(fexit_udp_enqueue_schedule_skb, struct sock *sk, struct sk_buff *skb, int ret)
{
	/* non-zero: dropped (receive buffer full, memory pressure) */
	if (ret == 0 && hook_on(HOOK_UDP_SOCK_ENQUEUED, BACKEND_FENTRY) &&
	    netns_allowed(sk_netns(sk)))
		record_skb(HOOK_UDP_SOCK_ENQUEUED, skb, sk);
	return 0;
}

/* The interface the socket's packets arrive on, cached by early demux. */
static __always_inline __u32 sk_rx_ifindex(struct sock *sk)
{
	if (bpf_core_field_exists(sk->sk_rx_dst_ifindex))
		return sk->sk_rx_dst_ifindex;
	return BPF_CORE_READ((struct inet_sock *)sk, rx_dst_ifindex);
}

/* tcp_recvmsg reports the newest RX stamp it copied (tss->ts[0]) here,
 * after the read, whenever one of the skbs read carried a stamp. */
SEC("fentry/tcp_recv_timestamp")
int BPF_PROG(fentry_tcp_recv_timestamp, void *msg, struct sock *sk, struct scm_timestamping_internal *tss)
{
	struct stamp s = {};

	if (!hook_on(HOOK_TCP_SOCK_READ, BACKEND_FENTRY))
		return 0;
	if (bpf_core_field_size(tss->ts) == 3 * sizeof(ktime_t)) {
		struct scm_timestamping_internal___ktime *ns = (void *)tss;

		s.tstamp = ns->ts[0];
	} else {
		s.tstamp = tss->ts[0].tv_sec * 1000000000LL + tss->ts[0].tv_nsec;
	}
	if (read_ifindex)
		s.ifindex = sk_rx_ifindex(sk);
	if (s.tstamp <= 0)
		s.skip = REASON_NO_STAMP;
	record_tcp_read(sk, &s);
	return 0;
}

/* udp_recvmsg/udpv6_recvmsg hand the datagram just read to skb_consume_udp. */
SEC("fentry/skb_consume_udp")
int BPF_PROG(fentry_skb_consume_udp, struct sock *sk, struct sk_buff *skb, int len)
{
	struct stamp s;

	/* MSG_PEEK passes the length negated: the datagram stays queued */
	if (len < 0 || !hook_on(HOOK_UDP_SOCK_READ, BACKEND_FENTRY))
		return 0;
	read_stamp(skb, &s);
	record_read(HOOK_UDP_SOCK_READ, sk, &s);
	return 0;
}
