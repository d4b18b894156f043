// SPDX-License-Identifier: Apache-2.0

// Package hwstamp is what stacktop knows about NIC hardware receive
// timestamps: which interfaces stamp received packets in hardware, with which
// filter and on which PTP hardware clock (PHC), and how a PHC time is turned
// into CLOCK_REALTIME, the clock of the kernel's software receive stamps. A
// NIC stamps with its own clock, which runs free of the system clock unless
// a PTP daemon (phc2sys) steers one to the other; the conversion measures
// the offset between the two clocks with the PTP_SYS_OFFSET_EXTENDED ioctl,
// and the rate from two such measurements, and says how wrong it may be.
package hwstamp

import (
	"errors"
	"math"
)

// Sample is one reading of PTP_SYS_OFFSET_EXTENDED: the system clock
// (CLOCK_REALTIME) read just before and just after the PHC, all in ns. The
// PHC was read at some instant between Before and After.
type Sample struct {
	Before, PHC, After int64
}

// Offset is realtime − PHC at one instant: the PHC time At maps to the
// realtime At + Ns, within ±Error ns.
type Offset struct {
	At    int64 // PHC time of the sample, ns
	Ns    int64 // realtime − PHC, ns
	Error int64 // bound on |Ns − the true offset|, ns
}

// ErrNoSample is returned when no reading of the PHC is usable.
var ErrNoSample = errors.New("no usable PHC sample (each had the system clock go backwards around the PHC read)")

// Best takes the offset from the sample with the narrowest window: the PHC
// was read within [Before, After], so pairing it with the midpoint is off
// by at most half the window. A sample whose window is negative (the system
// clock stepped back between the two reads) says nothing and is skipped;
// the narrowest window is the one least disturbed by an interrupt or a
// preemption between the reads.
func Best(samples []Sample) (Offset, error) {
	best := Offset{Error: math.MaxInt64}
	for _, s := range samples {
		window := s.After - s.Before
		if window < 0 {
			continue
		}
		// Half the window rounded up, so the bound holds for odd windows.
		if e := (window + 1) / 2; e < best.Error {
			best = Offset{At: s.PHC, Ns: s.Before + window/2 - s.PHC, Error: e}
		}
	}
	if best.Error == math.MaxInt64 {
		return Offset{}, ErrNoSample
	}
	return best, nil
}

// Conversion turns PHC times into realtime: the latest Offset, and the rate
// at which the offset changed since the one before it (the PHC's frequency
// error against the system clock), in parts per billion.
type Conversion struct {
	Ref     Offset
	RatePPB int64
	// RateError bounds the rate's error, ppb: both offsets' errors over
	// the time between them.
	RateError int64
}

// maxRatePPB bounds the frequency error a conversion accepts: a real
// oscillator is within a few hundred ppm of its nominal rate, and 0.1 %
// means the two offsets are not of one free-running clock (one was
// stepped, by a PTP daemon or settimeofday).
const maxRatePPB = 1_000_000

// Fit makes the conversion from two successive offsets of one PHC. Without
// a previous offset (prev.At == 0), or when the clocks were stepped in
// between, the rate is unknown: it is taken as 0 and its error as the
// largest accepted, maxRatePPB, so that Error says how little the
// conversion is then worth.
func Fit(prev, cur Offset) Conversion {
	c := Conversion{Ref: cur, RateError: maxRatePPB}
	span := cur.At - prev.At
	if prev.At == 0 || span <= 0 {
		return c
	}
	rate := float64(cur.Ns-prev.Ns) * 1e9 / float64(span)
	if math.Abs(rate) > maxRatePPB {
		return c
	}
	c.RatePPB = int64(math.Round(rate))
	c.RateError = int64(math.Ceil(float64(prev.Error+cur.Error) * 1e9 / float64(span)))
	return c
}

// Realtime converts a PHC time (ns) to CLOCK_REALTIME (ns), as the nic
// program does with the same integers (internal/latency/bpf/nic.h): the
// drift term truncated towards zero.
func (c Conversion) Realtime(phc int64) int64 {
	return phc + c.Ref.Ns + (phc-c.Ref.At)*c.RatePPB/1_000_000_000
}

// Error bounds the error of Realtime(phc), in ns: the reference offset's
// own error, plus the rate's error over the time since the reference.
func (c Conversion) Error(phc int64) int64 {
	d := phc - c.Ref.At
	if d < 0 {
		d = -d
	}
	return c.Ref.Error + int64(math.Ceil(float64(d)*float64(c.RateError)/1e9))
}
