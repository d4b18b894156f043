// SPDX-License-Identifier: Apache-2.0

package hwstamp

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Interface is what an interface says about hardware receive stamping.
type Interface struct {
	Name  string `json:"name"`
	Index int    `json:"index"`
	// RXHardware: the driver can stamp received packets in hardware
	// (SOF_TIMESTAMPING_RX_HARDWARE and RAW_HARDWARE in ETHTOOL_GET_TS_INFO).
	RXHardware bool `json:"rx_hardware"`
	// PHC is the index of its PTP hardware clock, /dev/ptpN; -1: none.
	PHC int `json:"phc"`
	// Filter is what it stamps now (SIOCGHWTSTAMP): "none", "all",
	// "ptpv2-event", …; empty when the driver does not say (Why tells).
	Filter string `json:"filter,omitempty"`
	// Why the filter is unknown, or why nothing else is known.
	Why string `json:"why,omitempty"`
}

// Stamps says whether the interface stamps some received packets now.
func (i Interface) Stamps() bool {
	return i.RXHardware && i.PHC >= 0 && i.Filter != "" && i.Filter != filterNames[unix.HWTSTAMP_FILTER_NONE]
}

const rxHardware = unix.SOF_TIMESTAMPING_RX_HARDWARE | unix.SOF_TIMESTAMPING_RAW_HARDWARE

// filterNames are the HWTSTAMP_FILTER_* values, as ethtool -T and
// hwstamp_ctl show them.
var filterNames = map[int32]string{
	unix.HWTSTAMP_FILTER_NONE:                "none",
	unix.HWTSTAMP_FILTER_ALL:                 "all",
	unix.HWTSTAMP_FILTER_SOME:                "some",
	unix.HWTSTAMP_FILTER_PTP_V1_L4_EVENT:     "ptpv1-l4-event",
	unix.HWTSTAMP_FILTER_PTP_V1_L4_SYNC:      "ptpv1-l4-sync",
	unix.HWTSTAMP_FILTER_PTP_V1_L4_DELAY_REQ: "ptpv1-l4-delay-req",
	unix.HWTSTAMP_FILTER_PTP_V2_L4_EVENT:     "ptpv2-l4-event",
	unix.HWTSTAMP_FILTER_PTP_V2_L4_SYNC:      "ptpv2-l4-sync",
	unix.HWTSTAMP_FILTER_PTP_V2_L4_DELAY_REQ: "ptpv2-l4-delay-req",
	unix.HWTSTAMP_FILTER_PTP_V2_L2_EVENT:     "ptpv2-l2-event",
	unix.HWTSTAMP_FILTER_PTP_V2_L2_SYNC:      "ptpv2-l2-sync",
	unix.HWTSTAMP_FILTER_PTP_V2_L2_DELAY_REQ: "ptpv2-l2-delay-req",
	unix.HWTSTAMP_FILTER_PTP_V2_EVENT:        "ptpv2-event",
	unix.HWTSTAMP_FILTER_PTP_V2_SYNC:         "ptpv2-sync",
	unix.HWTSTAMP_FILTER_PTP_V2_DELAY_REQ:    "ptpv2-delay-req",
	unix.HWTSTAMP_FILTER_NTP_ALL:             "ntp-all",
}

// FilterName names a HWTSTAMP_FILTER_* value.
func FilterName(f int32) string {
	if n, ok := filterNames[f]; ok {
		return n
	}
	return fmt.Sprintf("filter(%d)", f)
}

// Inspect reads what the interface of this network namespace says about
// stamping: its capabilities and PHC (ETHTOOL_GET_TS_INFO, any user) and its
// current filter (SIOCGHWTSTAMP, which needs no privilege either, and
// changes nothing). A driver without SIOCGHWTSTAMP (before 4.14, or one
// that never implemented it) leaves Filter empty and says so in Why.
func Inspect(ifc net.Interface) (Interface, error) {
	out := Interface{Name: ifc.Name, Index: ifc.Index, PHC: -1}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return out, fmt.Errorf("socket for the timestamping ioctls: %w", err)
	}
	defer unix.Close(fd)
	info, err := unix.IoctlGetEthtoolTsInfo(fd, ifc.Name)
	if err != nil {
		return out, fmt.Errorf("%s: ETHTOOL_GET_TS_INFO: %w", ifc.Name, err)
	}
	out.RXHardware = info.So_timestamping&rxHardware == rxHardware
	out.PHC = int(info.Phc_index)
	if !out.RXHardware {
		out.Why = "the driver does not stamp received packets in hardware"
		return out, nil
	}
	cfg, err := unix.IoctlGetHwTstamp(fd, ifc.Name)
	if err != nil {
		out.Why = fmt.Sprintf("SIOCGHWTSTAMP: %v", err)
		return out, nil
	}
	out.Filter = FilterName(cfg.Rx_filter)
	return out, nil
}

// InspectAll inspects every interface of this network namespace; an
// interface the ioctls refuse is kept, with the refusal in Why.
func InspectAll() ([]Interface, error) {
	ifcs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	out := make([]Interface, 0, len(ifcs))
	for _, ifc := range ifcs {
		i, err := Inspect(ifc)
		if err != nil {
			i.Why = err.Error()
		}
		out = append(out, i)
	}
	return out, nil
}

// samplesPerRead is how many PHC readings one PTP_SYS_OFFSET_EXTENDED takes
// (at most PTP_MAX_SAMPLES, 25): Best keeps the tightest.
const samplesPerRead = 9

// Clock is an open PTP hardware clock.
type Clock struct {
	Index int
	f     *os.File
}

// OpenClock opens /dev/ptp<index> for reading.
func OpenClock(index int) (*Clock, error) {
	f, err := os.Open(fmt.Sprintf("/dev/ptp%d", index))
	if err != nil {
		return nil, fmt.Errorf("opening the PHC of an interface: %w", err)
	}
	return &Clock{Index: index, f: f}, nil
}

// Read reads the PHC between two reads of CLOCK_REALTIME, several times.
func (c *Clock) Read() ([]Sample, error) {
	var samples []Sample
	var ioctlErr error
	err := withFd(c.f, func(fd int) {
		var ext *unix.PtpSysOffsetExtended
		ext, ioctlErr = unix.IoctlPtpSysOffsetExtended(fd, samplesPerRead)
		if ioctlErr != nil {
			return
		}
		for _, ts := range ext.Ts[:ext.Samples] {
			samples = append(samples, Sample{Before: nanos(ts[0]), PHC: nanos(ts[1]), After: nanos(ts[2])})
		}
	})
	if err == nil {
		err = ioctlErr
	}
	if err != nil {
		return nil, fmt.Errorf("/dev/ptp%d: PTP_SYS_OFFSET_EXTENDED: %w", c.Index, err)
	}
	return samples, nil
}

// Close closes the clock.
func (c *Clock) Close() error { return c.f.Close() }

func nanos(t unix.PtpClockTime) int64 { return t.Sec*1_000_000_000 + int64(t.Nsec) }

func withFd(f *os.File, do func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { do(int(fd)) })
}
