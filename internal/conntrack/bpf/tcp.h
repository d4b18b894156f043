/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * TCP: one entry per socket in `conns`, its counters read from the kernel's
 * tcp_sock at state changes, at destruction and by the refresh iterator.
 */
#ifndef CONNS_TCP_H
#define CONNS_TCP_H

#include "conns.h"

/* Kernel types only the TCP part reads, relocated like stacktop.h's; the
 * ___conns flavours are the kernel's struct of that name. */
#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
struct sock_common___conns {
	unsigned long skc_flags; /* sk_flags: enum sock_flags bits */
};

struct tcp_sock___conns {
	u32 write_seq;
};

struct bpf_iter_meta;

struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
	u32 uid;
};

#pragma clang attribute pop

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

/* The bases of the two sequence-space pairs tcp_bytes() reads (conn.rcv_base). */
static __always_inline u32 rcv_base(const struct tcp_sock *tp)
{
	return (u32)tp->bytes_received - tp->rcv_nxt;
}

static __always_inline u32 snd_base(const struct tcp_sock *tp)
{
	return (u32)tp->bytes_acked - tp->snd_una;
}

/* refresh_counters copies the counters of a connection from the socket;
 * fin_state is the state that says whether our FIN is in its sequence space. */
static __always_inline void refresh_counters(struct conn *c, const struct tcp_sock *tp, int fin_state)
{
	tcp_bytes(c, tp, fin_state);
	c->packets_in = tp->segs_in;
	c->packets_out = tp->segs_out;
	c->srtt_us = tp->srtt_us >> 3;
	c->retrans = tp->total_retrans;
}

/* refresh copies what changes over a connection's life from the socket,
 * the bases of its pairs too: call it with the socket's lock held (a state
 * change, the destruction) or where nothing better is known (conns_adopt). */
static __always_inline void refresh(struct conn *c, const struct tcp_sock *tp, int fin_state)
{
	refresh_counters(c, tp, fin_state);
	c->rcv_base = rcv_base(tp);
	c->snd_base = snd_base(tp);
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
	c->sk_id = sock_identity(skc);
}

/* active_guess tells whether a socket first seen after its start made its
 * connection with connect(): unless its local port is a known listener's. */
static __always_inline bool active_guess(const struct conn *c)
{
	struct listener_key lk = { .netns = c->owner.netns, .port = c->sport };
	return !bpf_map_lookup_elem(&listeners, &lk);
}

/* tcp_new fills a new entry for the socket, not in the table yet, with
 * flags; fin_state as for refresh(). */
static __always_inline void tcp_new(struct conn *fresh, const struct tcp_sock *tp, u64 cookie, u8 flags,
				    int fin_state)
{
	const struct sock *sk = (const void *)tp;

	fresh->cookie = cookie;
	fresh->sk = (u64)sk;
	fresh->flags = flags;
	fresh->owner.netns = sock_netns(sk); /* the socket's, known even before its owner */
	read_tuple(fresh, sk);
	refresh(fresh, tp, fin_state);
	if ((flags & CONN_PARTIAL) && active_guess(fresh))
		fresh->flags |= CONN_ACTIVE;
	fresh->state = sk->__sk_common.skc_state;
}

/* tcp_insert puts a new entry into the table (how: BPF_NOEXIST or
 * BPF_ANY), whole: user space reads the table while programs run, on other
 * CPUs or (on 7.x) while a program is preempted, so an entry must never be
 * seen before its addresses, state and owner are in. False if it is not
 * in: the table is full (counted), or with BPF_NOEXIST it was there. */
static __always_inline bool tcp_insert(const struct conn *fresh, u64 how)
{
	long err = bpf_map_update_elem(&conns, &fresh->cookie, fresh, how);
	if (err) {
		if (err != -EEXIST)
			count_drop(DROP_MAP_FULL);
		return false;
	}
	u8 one = 1;
	if (refresh_netns && !bpf_map_lookup_elem(&netns_new, &fresh->owner.netns))
		bpf_map_update_elem(&netns_new, &fresh->owner.netns, &one, BPF_NOEXIST);
	return true;
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
 * run was skipped for, and counts it (the loss counter subtracts those from
 * the kernel's count of skipped runs).
 *
 * The first program's last act is to note the change it applied in a
 * per-CPU slot (own_slot, note_ran); the spare, which runs right after it, finds the
 * change there and stops: a map lookup the verifier inlines, where
 * checking the socket's entry costs a lookup in the connection table (the
 * spare's share of a short connection's cost was a fifth). The spare
 * clears the slot, so that it never vouches for a later change.
 *
 * The slot is not found when something ran between the two programs on
 * that CPU and noted its own change there: a softirq state change that
 * interrupted a change in process context, or on 7.x another task
 * preempting this one. The spare then tells the two cases apart by the
 * socket's own entry, which holds across any of that: conns_tcp_state
 * leaves it in the new state, a skipped run in the old one (changes of one
 * socket do not interrupt each other: the socket lock serialises them). A
 * change that leaves no entry — one that is not tracked (a child's birth
 * into SYN_RECV, about one per accepted connection) or that found the
 * table full — the first program marks by socket address in state_marks
 * instead, and the spare consumes the mark: so that it counts only the
 * changes whose first run was skipped, and neither applies nor counts a
 * table-full change twice. Those keep the map rather than the slot
 * because a mark must hold across whatever runs between the two programs,
 * and a change that leaves no entry has nothing else that does.
 */
struct state_ran {
	u64 sk;
	u32 change;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct state_ran);
} state_slot SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* a mark only has to live from one program to the next */
	__type(key, u64);
	__type(value, u32);
} state_marks SEC(".maps");

/* The change a destruction is noted as: no state change has it. */
#define CHANGE_DESTROY 0xffffffffU

static __always_inline u32 state_mark(int oldstate, int newstate)
{
	return (u32)oldstate << 16 | (u32)newstate;
}

/* own_slot returns this CPU's slot, cleared, for the first program to note
 * its change in once applied (note_ran). Cleared first thing: a change
 * whose first run the kernel skips happens while a first run is under way
 * on the CPU, and then the slot cannot be vouching for it, even where the
 * spare that should have cleared it was skipped too. */
static __always_inline struct state_ran *own_slot(void)
{
	u32 zero = 0;
	struct state_ran *slot = bpf_map_lookup_elem(&state_slot, &zero);

	if (slot)
		slot->sk = 0;
	return slot;
}

static __always_inline void note_ran(struct state_ran *slot, const struct sock *sk, u32 change)
{
	if (slot) {
		slot->sk = (u64)sk;
		slot->change = change;
	}
}

/* first_ran tells whether the first program noted change in this CPU's
 * slot, and clears the slot. */
static __always_inline bool first_ran(const struct sock *sk, u32 change)
{
	u32 zero = 0;
	struct state_ran *slot = bpf_map_lookup_elem(&state_slot, &zero);

	if (!slot || slot->sk != (u64)sk || slot->change != change)
		return false;
	slot->sk = 0;
	return true;
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

/* apply_change applies a TCP socket's move from oldstate to newstate to its
 * entry c, in the table or about to be inserted (tcp_new). */
static __always_inline void apply_change(struct conn *c, int oldstate, int newstate)
{
	bool accepted = oldstate == TCP_SYN_RECV && newstate == TCP_ESTABLISHED;
	/* connect() and listen() start a socket's life in its process;
	 * close() and shutdown() move it into FIN_WAIT1 or LAST_ACK there:
	 * an accepted socket that closes before a refresh ran conns_owners
	 * (or where it is refused) learns its owner then. */
	bool started = newstate == TCP_SYN_SENT || newstate == TCP_LISTEN;
	bool closing = newstate == TCP_FIN_WAIT1 || newstate == TCP_LAST_ACK;

	if (started) {
		set_owner(&c->owner);
		c->flags |= CONN_OWNED;
	} else if (closing && !(c->flags & CONN_OWNED)) {
		set_process_owner(&c->owner);
		c->flags |= CONN_OWNED;
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
		return;
	/* What it wrote is final; what it reads is not yet: the application
	 * may still read what is queued (the peer's FIN can complete the
	 * close before that), so the entry is reported when the socket is
	 * destroyed, by tcp_destroyed(). */
	c->flags |= CONN_CLOSED;
	if (oldstate == TCP_LISTEN)
		bpf_map_delete_elem(&listeners, &lk);
}

/* tcp_state_change records a TCP socket's move from oldstate to newstate
 * (a tracked_change) in the entry under cookie; false if it has none (the
 * table is full). */
static __always_inline bool tcp_state_change(struct sock *sk, const struct tcp_sock *tp, u64 cookie, int oldstate,
					     int newstate)
{
	bool started = newstate == TCP_SYN_SENT || newstate == TCP_LISTEN;
	/* The FIN is queued right after the move into FIN_WAIT1 or LAST_ACK;
	 * a move into TCP_CLOSE keeps what the state before it had queued. */
	int fin_state = newstate == TCP_CLOSE || newstate == TCP_FIN_WAIT1 || newstate == TCP_LAST_ACK ?
				oldstate : newstate;
	struct conn *c = bpf_map_lookup_elem(&conns, &cookie);

	if (c && started) {
		/* A socket reused after close (connect() again) ends its
		 * previous connection here. */
		if (c->flags & CONN_CLOSED)
			report_closed(c);
		bpf_map_delete_elem(&conns, &cookie);
		c = NULL;
	}
	if (c) {
		if (newstate != TCP_CLOSE || !c->family)
			read_tuple(c, sk);
		refresh(c, tp, fin_state);
		apply_change(c, oldstate, newstate);
		return true;
	}
	bool accepted = oldstate == TCP_SYN_RECV && newstate == TCP_ESTABLISHED;
	struct conn fresh = {};
	tcp_new(&fresh, tp, cookie, newstate == TCP_SYN_SENT ? CONN_ACTIVE : started || accepted ? 0 : CONN_PARTIAL,
		fin_state);
	apply_change(&fresh, oldstate, newstate);
	/* Changes of one socket are serialised: only conns_adopt, at
	 * start-up, can have put a (partial) entry there since the lookup,
	 * and this one is newer. */
	return tcp_insert(&fresh, BPF_ANY);
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

/*
 * The refresh (conns_refresh) takes the entries user space has just read,
 * not the kernel's socket tables, and reaches each socket through the
 * address its entry keeps: a walk of the established table costs its
 * 262,144 buckets or more whatever it holds, and it walks one network
 * namespace at a time, so a host with a hundred pods would pay it a hundred
 * times a refresh. The address is not a pointer the verifier trusts, so
 * what the refresh reads of the socket is copied with probe reads (which
 * cannot fault) into scratch, and the copy is read like the socket.
 *
 * The refreshed entry goes back to user space only, never into the table:
 * without the socket's lock, a write there could land after a close that
 * the state programs recorded meanwhile, or in the element of another
 * socket that took the entry's place. (conns_refresh_netns, the iterator
 * that refreshes where the kernel refuses conns_refresh, does write the
 * table: see refresh_found.)
 *
 * An entry lives from a state change until the socket's destruction deletes
 * it, so its socket is there — unless both destruction programs' runs were
 * skipped (counted lost) and its memory (TCP sockets are
 * SLAB_TYPESAFE_BY_RCU: reused only as another socket) went to another:
 * the copy's cookie tells, which is never reused (where the entry is keyed
 * by its address, before 5.12, only the socket's identity does, which a
 * socket not yet hashed lacks, so there the entry is just left alone).
 * The copy's struct sock_common, with the cookie and the state, is read
 * after the counters: a socket closed or reused in between shows there.
 *
 * The bytes are differences of pairs the kernel moves together, two stores
 * each — bytes_received and rcv_nxt, bytes_acked and snd_una — and of
 * copied_seq and write_seq, which the application's calls move. A copy
 * taken between the two stores of a pair changes its base (conn.rcv_base),
 * which no update does once the socket is established: such a copy is not
 * counted: the refresh copies the socket again, and after SOCKET_COPIES
 * leaves the connection as the last refresh had it. A base that changed for
 * good (one recorded from a torn read by conns_adopt, whose iterator does
 * not lock sockets before 5.15) is taken once two refreshes in a row see
 * it (pending_bases). Before the move into
 * ESTABLISHED the bases do move: connect() sets snd_una after the move
 * into SYN_SENT.
 */
#define SOCKET_COPY_SIZE 4096
#define REFRESH_BATCH 256

/* The entries one run of conns_refresh refreshes, in place: as user space
 * read them from the table, then refreshed. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, REFRESH_BATCH);
	__type(key, u32);
	__type(value, struct conn);
} refresh_batch SEC(".maps");

/* The scratch is one buffer, not one per CPU: only user space runs the
 * refresh, one run or one iterator read at a time, and neither can be
 * preempted (a test run has preemption off; the iterator before 5.15 holds
 * its bucket's spin lock). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u8[SOCKET_COPY_SIZE]);
} socket_copy SEC(".maps");

struct bases {
	u32 rcv;
	u32 snd;
};

/* Bases a refresh saw that differ from their entry's, by key, for the next
 * refresh to confirm (rebased). Only the refresh (conns_refresh,
 * conns_refresh_netns) writes it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u64);
	__type(value, struct bases);
} pending_bases SEC(".maps");

/* widen extends [lo, hi) to cover a field of this kernel's struct. */
#define widen(lo, hi, type, field)                                                            \
	do {                                                                                  \
		u32 off = bpf_core_field_offset(type, field);                                 \
		u32 end = off + bpf_core_field_size(type, field);                             \
		lo = off < lo ? off : lo;                                                     \
		hi = end > hi ? end : hi;                                                     \
	} while (0)

/* copy_socket copies what refresh_counters(), whole(), read_tuple() and
 * is_entry_socket() read of the tcp_sock at addr into buf, at the same
 * offsets, or returns false: the span of tcp_sock from the first field
 * refresh_counters() reads to the end of the last (about 750 of its 2,300
 * bytes on 6.18; the rest of buf is stale), then its struct sock_common. A
 * field added to refresh_counters() must be added here. */
static __always_inline bool copy_socket(void *buf, u64 addr)
{
	u32 common = bpf_core_type_size(struct sock_common);
	u32 lo = ~0U, hi = 0;

	widen(lo, hi, struct tcp_sock, bytes_received);
	widen(lo, hi, struct tcp_sock, rcv_nxt);
	widen(lo, hi, struct tcp_sock, copied_seq);
	widen(lo, hi, struct tcp_sock, bytes_acked);
	widen(lo, hi, struct tcp_sock___conns, write_seq);
	widen(lo, hi, struct tcp_sock, snd_una);
	widen(lo, hi, struct tcp_sock, segs_in);
	widen(lo, hi, struct tcp_sock, segs_out);
	widen(lo, hi, struct tcp_sock, srtt_us);
	widen(lo, hi, struct tcp_sock, total_retrans);
	/* The probe read copies 8 bytes a load from where it starts: from an
	 * aligned start, no 64-bit counter is read in two halves. */
	lo &= ~7U;
	/* Never true where user space runs either refresh (socketFits): it
	 * bounds the copy for the verifier. */
	if (hi > SOCKET_COPY_SIZE || common > lo)
		return false;
	return !bpf_probe_read_kernel(buf + lo, hi - lo, (const void *)addr + lo) &&
	       !bpf_probe_read_kernel(buf, common, (const void *)addr);
}

static __always_inline bool is_entry_socket(const struct conn *c, const struct sock *sk)
{
	if (c->cookie == c->sk) /* keyed by its address: no cookie then */
		return sock_identity(&sk->__sk_common) == c->sk_id;
	return sk->__sk_common.skc_cookie.counter == c->cookie;
}

/* whole tells whether a copy tp of c's socket, in state, has its pairs
 * whole (see above): neither copied_seq nor snd_una ever passes the other
 * of its pair, and the bases are the entry's (or still moving). */
static __always_inline bool whole(const struct conn *c, const struct tcp_sock *tp, int state)
{
	u32 write_seq = ((const struct tcp_sock___conns *)tp)->write_seq;

	if ((s32)(tp->rcv_nxt - tp->copied_seq) < 0 || (s32)(write_seq - tp->snd_una) < 0)
		return false;
	return (rcv_base(tp) == c->rcv_base && snd_base(tp) == c->snd_base) || state == TCP_SYN_SENT;
}

/* rebased tells whether the bases of tp, which differ from its entry's,
 * are what the previous refresh saw too, and else notes them for the next. */
static __always_inline bool rebased(const struct conn *c, const struct tcp_sock *tp)
{
	struct bases seen = { .rcv = rcv_base(tp), .snd = snd_base(tp) };
	u64 key = c->cookie;
	struct bases *pending = bpf_map_lookup_elem(&pending_bases, &key);

	if (pending && pending->rcv == seen.rcv && pending->snd == seen.snd)
		return true;
	bpf_map_update_elem(&pending_bases, &key, &seen, BPF_ANY);
	return false;
}

/* Copies of one socket a refresh takes at most: one caught in a pair's
 * update is taken again (the update is two stores apart). */
#define SOCKET_COPIES 3

/* What copy_whole made of an entry's socket. */
enum copied {
	COPIED_WHOLE,  /* the scratch holds a copy whose pairs are whole */
	COPIED_TORN,   /* every copy caught an update, or the bases changed since the last refresh */
	COPIED_CLOSED, /* closed: its counters are final at its destruction */
	COPIED_GONE,   /* the copy failed, or is not the entry's socket */
};

/* copy_whole copies the socket at addr, entry c's, into buf (the scratch)
 * without the socket's lock, until a copy has its pairs whole, at most
 * SOCKET_COPIES times; a base that changed for good is taken on the last
 * copy once two refreshes in a row saw it (rebased). found: the caller
 * found the socket itself and c by its key (an iterator), so the copy need
 * not show it is c's socket. */
static __always_inline enum copied copy_whole(const struct conn *c, void *buf, u64 addr, bool found)
{
	const struct tcp_sock *tp = buf;
	const struct sock *sk = buf;

	if (c->flags & CONN_CLOSED)
		return COPIED_CLOSED;
	for (int copy = 0; copy < SOCKET_COPIES; copy++) {
		if (!copy_socket(buf, addr) || !(found || is_entry_socket(c, sk)))
			return COPIED_GONE;
		int state = sk->__sk_common.skc_state;
		if (state == TCP_CLOSE)
			return COPIED_CLOSED;
		if (whole(c, tp, state) || (copy == SOCKET_COPIES - 1 && rebased(c, tp)))
			return COPIED_WHOLE;
	}
	return COPIED_TORN;
}

/* refresh_copied refreshes c's counters from a whole copy of its socket in
 * buf. The bases stay the entry's: those of its last state change, read
 * under the socket's lock (a confirmed new one is confirmed again at every
 * refresh, at the cost of the copies). */
static __always_inline void refresh_copied(struct conn *c, const void *buf)
{
	const struct sock *sk = buf;

	/* connect() moves a socket into SYN_SENT before it binds the local
	 * port (tcp_v4_connect, tcp_v6_connect: inet_hash_connect comes
	 * after), so that change recorded port 0. */
	if (!c->sport)
		read_tuple(c, sk);
	refresh_counters(c, buf, sk->__sk_common.skc_state);
}

static __always_inline void *socket_scratch(void)
{
	u32 zero = 0;
	return bpf_map_lookup_elem(&socket_copy, &zero);
}

/* refresh_entry refreshes c, an entry as user space read it, from its
 * socket, read without the socket's lock. Where it cannot (SOCKET_COPIES
 * copies caught an update, or the bases changed since the last refresh) it
 * sets CONN_STALE, for user space to keep what it had; it leaves c alone for
 * a closed socket (final at its destruction), and sets CONN_GONE where the
 * socket is no longer at the entry's address: destroyed meanwhile (its
 * closed event has it), or without its destruction seen. */
static __always_inline void refresh_entry(struct conn *c)
{
	void *buf = socket_scratch();

	if (!buf)
		return;
	switch (copy_whole(c, buf, c->sk, false)) {
	case COPIED_WHOLE:
		refresh_copied(c, buf);
		break;
	case COPIED_TORN:
		c->flags |= CONN_STALE;
		break;
	case COPIED_GONE:
		if (c->cookie != c->sk) /* a cookie is never reused */
			c->flags |= CONN_GONE;
		break;
	case COPIED_CLOSED:
		break;
	}
}

/*
 * refresh_found refreshes c, the table's own entry of the socket at sk,
 * which conns_refresh_netns visits under its hash bucket's lock, not the
 * socket's: so it reads the socket as refresh_entry does, through a copy
 * whose pairs are whole, and writes nothing of a torn one. The entry then
 * keeps what the last refresh or state change wrote, which is what
 * CONN_STALE has user space keep where conns_refresh runs.
 *
 * It writes the counters and a tuple still without its port into the
 * table, never the bases, state, flags or owner, which are the state
 * programs' (the bases read under the socket's lock). A write
 * cannot land after a close: the move into TCP_CLOSE unhashes the socket,
 * under this same bucket lock, before its tracepoint runs (tcp_set_state();
 * one going to TIME_WAIT leaves the bucket in inet_twsk_hashdance() before
 * that), so the close's state change and the destruction that deletes the
 * entry come after the iterator has left the socket.
 */
static __always_inline void refresh_found(struct conn *c, const struct sock *sk)
{
	void *buf = socket_scratch();

	if (buf && copy_whole(c, buf, (u64)sk, true) == COPIED_WHOLE)
		refresh_copied(c, buf);
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


#endif /* CONNS_TCP_H */
