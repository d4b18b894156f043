// SPDX-License-Identifier: Apache-2.0

package hwstamp

import (
	"errors"
	"net"
	"testing"
)

// A PHC that runs 12 ppm fast and started 1.5 s behind realtime: phcAt is
// its reading at realtime r (ns). The samples below are what
// PTP_SYS_OFFSET_EXTENDED would return for it with the given windows, the
// PHC read at a given point of each window (not its middle: the conversion
// must hold whatever that point).
const (
	trueRatePPB = 12_000
	startOffset = 1_500_000_000 // realtime − PHC at realtime 0
)

func phcAt(r int64) int64 { return r - startOffset + r*trueRatePPB/1_000_000_000 }

// sample reads the PHC at realtime readAt within the window [before, after].
func sample(before, readAt, after int64) Sample {
	return Sample{Before: before, PHC: phcAt(readAt), After: after}
}

func TestBestTakesTheNarrowestWindow(t *testing.T) {
	const r = 1_000_000_000_000 // realtime 1000 s
	samples := []Sample{
		sample(r, r+5_000, r+9_000),            // window 9 µs (a preemption)
		sample(r+10_000, r+10_700, r+11_000),   // 1 µs, read 700 ns in
		sample(r+12_000, r+12_100, r+13_200),   // 1.2 µs
		{Before: r + 14_000, PHC: 0, After: r}, // clock stepped back: skipped
	}
	o, err := Best(samples)
	if err != nil {
		t.Fatal(err)
	}
	if o.Error != 500 {
		t.Errorf("error %d ns, want 500 (half the narrowest window)", o.Error)
	}
	if o.At != phcAt(r+10_700) {
		t.Errorf("offset taken at PHC %d, want the second sample's %d", o.At, phcAt(r+10_700))
	}
	trueNs := (r + 10_700) - phcAt(r+10_700)
	if d := o.Ns - trueNs; d < -o.Error || d > o.Error {
		t.Errorf("offset %d is %d ns from the true %d, beyond its error %d", o.Ns, d, trueNs, o.Error)
	}
}

func TestBestRefusesOnlyBackwardWindows(t *testing.T) {
	if _, err := Best([]Sample{{Before: 10, PHC: 5, After: 9}}); !errors.Is(err, ErrNoSample) {
		t.Errorf("got %v, want ErrNoSample", err)
	}
	if _, err := Best(nil); !errors.Is(err, ErrNoSample) {
		t.Errorf("no samples: got %v, want ErrNoSample", err)
	}
}

// Two offsets 2 s apart (the tracer's refresh) give the rate; a PHC time
// 1.7 s after the second converts to within the bound Error states.
func TestConversionFollowsTheRate(t *testing.T) {
	const r = 500_000_000_000
	prev, err := Best([]Sample{sample(r, r+300, r+800)})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := Best([]Sample{sample(r+2e9, r+2e9+600, r+2e9+1_000)})
	if err != nil {
		t.Fatal(err)
	}
	c := Fit(prev, cur)
	// realtime − PHC shrinks by 12 µs per s: −12,000 ppb.
	if c.RatePPB > -trueRatePPB+c.RateError || c.RatePPB < -trueRatePPB-c.RateError {
		t.Errorf("rate %d ± %d ppb, want −%d", c.RatePPB, c.RateError, trueRatePPB)
	}
	for _, later := range []int64{0, 1_700_000_000, 10_000_000_000} {
		real := r + 2e9 + later
		got := c.Realtime(phcAt(real))
		bound := c.Error(phcAt(real))
		if d := got - real; d < -bound || d > bound {
			t.Errorf("%d ns after the reference: converted %d, %d ns off the true %d, beyond the bound %d",
				later, got, d, real, bound)
		}
	}
	// Without the rate, 1.7 s later the 12 ppm drift alone is 20 µs off:
	// the bound must say so.
	alone := Fit(Offset{}, cur)
	real := int64(r + 2e9 + 1_700_000_000)
	if d := alone.Realtime(phcAt(real)) - real; d < 20_000 {
		t.Fatalf("without a rate the conversion should be ahead by the drift, is %d ns off", d)
	} else if alone.Error(phcAt(real)) < d {
		t.Errorf("without a rate the bound %d ns is below the error %d", alone.Error(phcAt(real)), d)
	}
}

// A PTP daemon stepping the PHC between two refreshes makes an absurd rate:
// it is not believed.
func TestSteppedClockHasNoRate(t *testing.T) {
	prev := Offset{At: 1e9, Ns: 5_000, Error: 100}
	cur := Offset{At: 3e9, Ns: 5_000 + 37e9, Error: 100} // stepped by 37 s (TAI − UTC)
	if c := Fit(prev, cur); c.RatePPB != 0 || c.RateError != maxRatePPB {
		t.Errorf("stepped clock: rate %d ± %d, want 0 ± %d", c.RatePPB, c.RateError, maxRatePPB)
	}
}

// Loopback has no PHC and stamps nothing in hardware; asking needs no
// privilege and changes nothing.
func TestInspectLoopback(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	i, err := Inspect(*lo)
	if err != nil {
		t.Fatal(err)
	}
	if i.RXHardware || i.PHC != -1 || i.Stamps() || i.Filter != "" || i.Why == "" {
		t.Errorf("lo: %+v", i)
	}
}
