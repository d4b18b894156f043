// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"fmt"
	"net/netip"
	"strconv"
)

// humanBytes renders a byte count in binary units, like stream does
// (512B, 1.50KiB, 12.3MiB), with at most three significant digits so
// columns stay narrow and comparable at a glance.
func humanBytes(v float64) string {
	const units = "KMGTPE"
	if v < 999.5 {
		return strconv.FormatFloat(v, 'f', 0, 64) + "B"
	}
	i := -1
	for v >= 999.5 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return threeDigits(v) + units[i:i+1] + "iB"
}

func humanRate(v float64) string { return humanBytes(v) + "/s" }

// threeDigits keeps three significant digits: 1.23, 12.3, 123.
func threeDigits(v float64) string {
	switch {
	case v < 9.995:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 99.95:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

// humanRTT renders a smoothed RTT; 0 means the kernel has no estimate (UDP,
// or a TCP socket that never exchanged data) and shows as "-".
func humanRTT(us uint32) string {
	switch {
	case us == 0:
		return "-"
	case us < 1000:
		return fmt.Sprintf("%d µs", us)
	case us < 1000000:
		return threeDigits(float64(us)/1e3) + " ms"
	default:
		return threeDigits(float64(us)/1e6) + " s"
	}
}

// humanWait renders a read wait in µs; 0 (no read since the last refresh)
// shows as "-".
func humanWait(us uint64) string { return humanRTT(uint32(min(us, 1<<32-1))) }

// endpoint renders addr:port the way ss does: IPv6 in brackets, the
// wildcard address as "*"; port is portText's or a service name.
func endpoint(addr netip.Addr, port string) string {
	host := "*"
	if addr.IsValid() && !addr.IsUnspecified() {
		host = addr.Unmap().String()
		if addr.Unmap().Is6() {
			host = "[" + host + "]"
		}
	}
	return host + ":" + port
}

// portText is a port number, "*" for the wildcard port.
func portText(port uint16) string {
	if port == 0 {
		return "*"
	}
	return strconv.Itoa(int(port))
}

func pidText(pid uint32) string {
	if pid == 0 {
		return "-"
	}
	return strconv.FormatUint(uint64(pid), 10)
}

// orDash shows an unknown name (a socket whose owner was never seen) as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func countText(v uint64) string { return strconv.FormatUint(v, 10) }
