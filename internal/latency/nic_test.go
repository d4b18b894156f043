// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/hwstamp"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestNICWithoutHardwareStamps: on an interface that stamps nothing in
// hardware (a veth: no PHC), the nic hook counts every frame the interface
// received as no_hw_stamp — exactly as many as the interface's own
// rx_packets counter grew — and records none, nor takes any for a stamp of
// a clock it does not convert. The same path serves every host whose NICs
// stamp nothing.
func TestNICWithoutHardwareStamps(t *testing.T) {
	p := testenv.NewPeer(t, "stl-nic", 28)
	ifc, err := net.InterfaceByIndex(p.HostIndex)
	if err != nil {
		t.Fatal(err)
	}
	info, err := hwstamp.Inspect(*ifc)
	if err != nil {
		t.Fatal(err)
	}
	if info.RXHardware || info.PHC != -1 || info.Stamps() {
		t.Fatalf("a veth should not stamp in hardware: %+v", info)
	}
	tr := start(t, Config{Hooks: HookSet(0).With(NIC).With(UDPStart), Ifindexes: []uint32{uint32(p.HostIndex)}})
	if clocks := tr.NICClocks(); len(clocks) != 0 {
		t.Errorf("clocks converted for an interface without one: %+v", clocks)
	}
	waitForStamps(t, tr, p)

	reasons := func() map[string]uint64 {
		cs, err := tr.Counters()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint64{}
		for _, c := range cs {
			if c.Hook == NIC.String() {
				out[c.Reason] = c.Count
			}
		}
		return out
	}
	rx0, before := rxPackets(t, p.HostIf), reasons()
	const datagrams = 20
	p.UDPToHost(t, testenv.V4, datagrams, 0)
	p.UDPToHost(t, testenv.V6, datagrams, 0)
	testenv.Eventually(t, 5*time.Second, "every received frame counted as no_hw_stamp", func() error {
		rx := rxPackets(t, p.HostIf)
		now := reasons()
		if again := rxPackets(t, p.HostIf); again != rx {
			return fmt.Errorf("frames still arriving")
		}
		frames, counted := rx-rx0, now["no_hw_stamp"]-before["no_hw_stamp"]
		if frames < 2*datagrams || counted != frames {
			return fmt.Errorf("%d frames received, %d counted as no_hw_stamp (want all, at least %d); counters %v",
				frames, counted, 2*datagrams, now)
		}
		for _, r := range []string{"no_phc", "no_stamp", "future_stamp", Reasons[reasonRecorded]} {
			if now[r] != before[r] {
				return fmt.Errorf("%s went from %d to %d", r, before[r], now[r])
			}
		}
		return nil
	})
	if n := totals(t, tr).of(NIC).Count(); n != 0 {
		t.Errorf("nic recorded %d samples without a hardware stamp", n)
	}
}

// rxPackets is the interface's count of frames received.
func rxPackets(t *testing.T, ifname string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/sys/class/net/" + ifname + "/statistics/rx_packets")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
