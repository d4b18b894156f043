// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/stacktop/stacktop/internal/hwstamp"
)

// NICClock is how the nic hook converts one interface's hardware stamps.
type NICClock struct {
	Interface string `json:"interface"`
	PHC       int    `json:"phc"`    // /dev/ptpN
	Filter    string `json:"filter"` // what the interface stamps (SIOCGHWTSTAMP)
	// RatePPB is how much faster realtime runs than the PHC, ppb.
	RatePPB int64 `json:"rate_ppb"`
	// ErrorNs bounds the error of a converted stamp until the next
	// refresh; a nic sample may be off by as much. 0 until converted.
	ErrorNs int64 `json:"error_ns"`
	// Why the interface's stamps are not converted (its PHC could not be
	// read), else empty.
	Why string `json:"why,omitempty"`
}

// nicClock follows one PHC for the interfaces that stamp with it.
type nicClock struct {
	clock *hwstamp.Clock
	ifcs  []hwstamp.Interface
	prev  hwstamp.Offset
	conv  hwstamp.Conversion
	err   error // the last refresh's
}

// nicClocks keeps nic_clocks, the conversion of each stamping interface of
// our namespace, in step with the PHCs.
type nicClocks struct {
	netns  uint32
	mu     sync.Mutex // NICClocks against refresh
	clocks []*nicClock
}

// openNICClocks finds the interfaces of our namespace (those of ifindexes,
// or all) whose driver stamps received packets in hardware and that have a
// PHC, and opens each PHC once. Interfaces that stamp nothing now are left
// out: their packets count as no_hw_stamp.
func openNICClocks(netns uint64, ifindexes []uint32) (*nicClocks, error) {
	ifcs, err := hwstamp.InspectAll()
	if err != nil {
		return nil, err
	}
	n := &nicClocks{netns: uint32(netns)}
	byPHC := map[int]*nicClock{}
	for _, ifc := range ifcs {
		if !ifc.Stamps() || (len(ifindexes) > 0 && !slices.Contains(ifindexes, uint32(ifc.Index))) {
			continue
		}
		c := byPHC[ifc.PHC]
		if c == nil {
			clock, err := hwstamp.OpenClock(ifc.PHC)
			if err != nil {
				n.close()
				return nil, fmt.Errorf("interface %s: %w", ifc.Name, err)
			}
			c = &nicClock{clock: clock}
			byPHC[ifc.PHC] = c
			n.clocks = append(n.clocks, c)
		}
		c.ifcs = append(c.ifcs, ifc)
	}
	return n, nil
}

// refresh measures each PHC against realtime again and stores the
// conversions. A PHC that cannot be read keeps its last conversion (its
// error grows, which NICClocks shows) and the others go on.
func (n *nicClocks) refresh(maps *latencyMaps) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, c := range n.clocks {
		c.err = c.refresh()
		if c.err != nil {
			errs = append(errs, c.err)
			continue
		}
		v := latencyNicClock{RefPhc: c.conv.Ref.At, Offset: c.conv.Ref.Ns, RatePpb: c.conv.RatePPB}
		for _, ifc := range c.ifcs {
			if err := maps.NicClocks.Put(latencyNicKey{Netns: n.netns, Ifindex: uint32(ifc.Index)}, v); err != nil {
				errs = append(errs, fmt.Errorf("storing the clock of %s: %w", ifc.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (c *nicClock) refresh() error {
	samples, err := c.clock.Read()
	if err != nil {
		return err
	}
	cur, err := hwstamp.Best(samples)
	if err != nil {
		return fmt.Errorf("/dev/ptp%d: %w", c.clock.Index, err)
	}
	c.conv = hwstamp.Fit(c.prev, cur)
	c.prev = cur
	return nil
}

// list reports each interface's conversion, with the error bound of a stamp
// taken just before the next refresh.
func (n *nicClocks) list() []NICClock {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []NICClock
	for _, c := range n.clocks {
		for _, ifc := range c.ifcs {
			nc := NICClock{Interface: ifc.Name, PHC: ifc.PHC, Filter: ifc.Filter, RatePPB: c.conv.RatePPB}
			if c.conv.Ref.At != 0 {
				nc.ErrorNs = c.conv.Error(c.conv.Ref.At + maintainEvery.Nanoseconds())
			}
			if c.err != nil {
				nc.Why = c.err.Error()
			}
			out = append(out, nc)
		}
	}
	return out
}

func (n *nicClocks) close() {
	for _, c := range n.clocks {
		if err := c.clock.Close(); err != nil {
			slog.Warn("closing a PHC", "phc", c.clock.Index, "err", err)
		}
	}
}

// startNICClocks opens the PHCs of the stamping interfaces of our namespace
// and stores their first conversions before the nic hook attaches.
func (t *Tracer) startNICClocks(ifindexes []uint32) error {
	n, err := openNICClocks(t.scope.own, ifindexes)
	if err != nil {
		return err
	}
	t.nic = n
	if err := n.refresh(&t.objs); err != nil {
		return err
	}
	clocks := n.list()
	if len(clocks) == 0 {
		slog.Warn("nic: no interface in scope stamps received packets in hardware: every frame counts as no_hw_stamp (see stacktop doctor)")
	}
	for _, c := range clocks {
		slog.Info("nic: converting hardware stamps", "interface", c.Interface, "phc", c.PHC, "filter", c.Filter,
			"error_ns", c.ErrorNs)
	}
	return nil
}

// NICClocks reports, for the nic hook, how each stamping interface's
// stamps are converted; nil when the hook is off or no interface of the
// namespace stamps in hardware.
func (t *Tracer) NICClocks() []NICClock {
	if t.nic == nil {
		return nil
	}
	return t.nic.list()
}
