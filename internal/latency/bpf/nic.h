/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * nic: the time from the NIC's receive stamp to the kernel's software stamp
 * (skb->tstamp, netif_receive_skb): the wire-to-host interconnect, the
 * interrupt and NAPI's delay. The NIC stamps with its own PTP hardware clock
 * (PHC); user space (internal/hwstamp) measures, per device, what turns
 * that clock into CLOCK_REALTIME and keeps it in nic_clocks.
 */
#ifndef LATENCY_NIC_H
#define LATENCY_NIC_H

#include "record.h"

/* A device, by its namespace and index (indexes repeat between namespaces). */
struct nic_key {
	__u32 netns;
	__u32 ifindex;
};

/* realtime = phc + offset + (phc - ref_phc) * rate_ppb / 1e9, as
 * hwstamp.Conversion.Realtime computes it. */
struct nic_clock {
	__s64 ref_phc;
	__s64 offset;
	__s64 rate_ppb;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct nic_key);
	__type(value, struct nic_clock);
} nic_clocks SEC(".maps");

/* The NIC's stamp, raw PHC time; 0: none. The shared info is not a field
 * of the skb but memory after its data: read as a kernel address. */
static __always_inline __s64 skb_hwtstamp(struct sk_buff *skb)
{
	struct skb_shared_info *shinfo = (void *)(skb->head + skb->end);

	return BPF_CORE_READ(shinfo, hwtstamps.hwtstamp);
}

/* The drift term with unsigned division (signed division needs BPF ISA
 * v4, 6.6+): truncated towards zero, as Go's. |d| of a few seconds times
 * a rate of at most 1e6 ppb stays far below 2^63. */
static __always_inline __s64 drift(__s64 d, __s64 rate_ppb)
{
	bool neg = (d < 0) != (rate_ppb < 0);
	__u64 m = (__u64)(d < 0 ? -d : d) * (__u64)(rate_ppb < 0 ? -rate_ppb : rate_ppb) / 1000000000ULL;

	return neg ? -(__s64)m : (__s64)m;
}

static __always_inline void record_nic(struct sk_buff *skb)
{
	struct nic_key key = {};
	struct nic_clock *c;
	struct stamp s;
	__s64 hw, sw;

	key.netns = skb_netns(skb);
	if (!netns_allowed(key.netns))
		return;
	read_stamp(skb, &s);
	/* skb_iif is set after this tracepoint: the skb is on its device. */
	key.ifindex = skb->dev->ifindex;
	s.ifindex = key.ifindex;
	if (!ifindex_allowed(s.ifindex))
		return;
	if (s.skip) {
		count(HOOK_NIC, s.skip);
		return;
	}
	hw = skb_hwtstamp(skb);
	if (hw <= 0) {
		count(HOOK_NIC, REASON_NO_HW_STAMP);
		return;
	}
	c = bpf_map_lookup_elem(&nic_clocks, &key);
	if (!c) {
		count(HOOK_NIC, REASON_NO_PHC);
		return;
	}
	/* The sample counts from the NIC's stamp, converted, until the
	 * software stamp: no clock is read. Not for --slow: its events and
	 * trails are keyed by the software stamp, and the segment is the
	 * same for every packet of an interrupt. */
	sw = s.tstamp;
	s.tstamp = hw + c->offset + drift(hw - c->ref_phc, c->rate_ppb);
	record_until(HOOK_NIC, sw, &s, 0, NULL, skb, false);
}

#endif /* LATENCY_NIC_H */
