// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// refreshClock stores what turns the BPF programs' clocks into
// CLOCK_REALTIME, the clock of RX stamps: for bpf_ktime_get_tai_ns CLOCK_TAI
// - CLOCK_REALTIME (subtracted), for bpf_ktime_get_ns and a TCP socket's
// tcp_clock_cache CLOCK_REALTIME - CLOCK_MONOTONIC (added). The latter
// follows a stepped clock only at each refresh (NTP slewing moves both
// clocks alike).
func (t *Tracer) refreshClock() error {
	monotonic, err := monotonicToRealtime()
	if err != nil {
		return err
	}
	helper := monotonic
	if t.taiClock {
		if helper, err = taiToRealtime(); err != nil {
			return err
		}
	}
	for clock, offset := range map[latencyClock]int64{
		latencyClockCLOCK_OF_HELPER:    helper,
		latencyClockCLOCK_OF_TCP_CACHE: monotonic,
	} {
		if err := t.objs.ClockOffset.Put(clock, offset); err != nil {
			return fmt.Errorf("storing the clock offset: %w", err)
		}
	}
	return nil
}

func taiToRealtime() (int64, error) {
	var tx unix.Timex
	if _, err := unix.Adjtimex(&tx); err != nil {
		return 0, fmt.Errorf("adjtimex: %w", err)
	}
	return int64(tx.Tai) * 1e9, nil
}

// monotonicToRealtime reads CLOCK_REALTIME between two CLOCK_MONOTONIC reads
// and pairs it with their midpoint. Its error is half the time between the
// two reads, so it keeps the tightest of a few tries: a thread preempted
// mid-way would otherwise shift "now" by the preemption, and packets younger
// than that would be skipped as future_stamp.
func monotonicToRealtime() (int64, error) {
	const tries = 5
	var offset, gap int64 = 0, math.MaxInt64
	for range tries {
		var before, real, after unix.Timespec
		for _, c := range []struct {
			id int32
			ts *unix.Timespec
		}{{unix.CLOCK_MONOTONIC, &before}, {unix.CLOCK_REALTIME, &real}, {unix.CLOCK_MONOTONIC, &after}} {
			if err := unix.ClockGettime(c.id, c.ts); err != nil {
				return 0, fmt.Errorf("clock_gettime: %w", err)
			}
		}
		if g := after.Nano() - before.Nano(); g < gap {
			offset, gap = real.Nano()-(before.Nano()+after.Nano())/2, g
		}
	}
	return offset, nil
}

// rxTimestamping holds a socket asking for RX software timestamps: while any
// such socket exists the kernel stamps every received skb (skb->tstamp) in
// netif_receive_skb/netif_rx, in every namespace. Closing it turns stamping
// back off unless another socket on the host wants it.
type rxTimestamping struct{ fd int }

func enableRXTimestamping() (*rxTimestamping, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket for RX timestamping: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING, unix.SOF_TIMESTAMPING_RX_SOFTWARE); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("enabling RX software timestamping: %w", err)
	}
	return &rxTimestamping{fd: fd}, nil
}

func (r *rxTimestamping) Close() error { return unix.Close(r.fd) }
