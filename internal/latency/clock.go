package latency

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// refreshClock stores CLOCK_TAI - CLOCK_REALTIME for the BPF programs, which
// take "now" from bpf_ktime_get_tai_ns while RX stamps are CLOCK_REALTIME.
func (t *Tracer) refreshClock() error {
	var tx unix.Timex
	if _, err := unix.Adjtimex(&tx); err != nil {
		return fmt.Errorf("adjtimex: %w", err)
	}
	offset := int64(tx.Tai) * 1e9
	if err := t.maps["clock_offset"].Put(uint32(0), offset); err != nil {
		return fmt.Errorf("storing the TAI offset: %w", err)
	}
	return nil
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
