// SPDX-License-Identifier: Apache-2.0

// Command nicguest checks the latency nic probe against emulated hardware
// stamps, inside a qemu guest with two igb NICs on one hub (run.sh boots
// it). It turns on RX hardware stamping of PTPv2 event frames on the
// receiving NIC, runs `stacktop latency -e nic` on it, sends PTPv2 Sync
// frames from the other NIC, and reads each frame's stamps itself through
// SO_TIMESTAMPING (raw hardware and software) on a packet socket. It passes
// when the probe recorded every frame, and the mean of its samples agrees
// with the mean of the test's own conversion (the same PHC read with
// PTP_SYS_OFFSET_EXTENDED) within maxMeanDiff. It prints NICGUEST PASS or
// NICGUEST FAIL and why.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/hwstamp"
)

const (
	frames    = 30
	etherPTP  = 0x88f7
	rxsatrh   = 0xB630 // 82576 register: the stamped frame's source id, high half
	stampWait = 30 * time.Second
	// maxMeanDiff bounds |mean of the probe's samples − mean of the test's|:
	// both convert the same stamps with offsets measured moments apart, each
	// within half a PTP_SYS_OFFSET_EXTENDED window (tens of µs under TCG).
	maxMeanDiff = 100 * time.Microsecond
)

func main() {
	if len(os.Args) != 4 {
		fail(errors.New("usage: nicguest STACKTOP SENDER_IFACE RECEIVER_IFACE"))
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fail(err)
	}
	fmt.Println("NICGUEST PASS")
}

func fail(err error) {
	fmt.Println("NICGUEST FAIL:", err)
	os.Exit(1)
}

func run(stacktop, sendIf, recvIf string) error {
	from, err := net.InterfaceByName(sendIf)
	if err != nil {
		return err
	}
	to, err := net.InterfaceByName(recvIf)
	if err != nil {
		return err
	}
	if err := stampPTPEvents(recvIf); err != nil {
		return err
	}
	probe, err := startProbe(stacktop, recvIf)
	if err != nil {
		return err
	}
	r, err := listen(to)
	if err != nil {
		return err
	}
	defer r.close()
	received := make(chan []time.Duration, 1)
	recvErr := make(chan error, 1)
	rearmed := make(chan struct{}, frames)
	go func() {
		lats, err := r.receive(rearmed)
		received <- lats
		recvErr <- err
	}()
	if err := send(from, to, rearmed); err != nil {
		return err
	}
	var own []time.Duration
	select {
	case own = <-received:
		if err := <-recvErr; err != nil {
			return err
		}
	case <-time.After(stampWait):
		return fmt.Errorf("the receiver did not get %d frames in %s", frames, stampWait)
	}
	count, sum, err := probe.stop()
	if err != nil {
		return err
	}
	var ownSum time.Duration
	for _, l := range own {
		ownSum += l
	}
	fmt.Printf("nicguest: probe %d samples, mean %v; test %d stamped frames, mean %v, each: %v\n",
		count, sum/time.Duration(max(count, 1)), len(own), ownSum/time.Duration(max(len(own), 1)), own)
	if len(own) != frames || count != frames {
		return fmt.Errorf("%d frames sent, %d stamped in hardware, %d recorded by the probe: want all", frames, len(own), count)
	}
	diff := (sum - ownSum) / frames
	if math.Abs(float64(diff)) > float64(maxMeanDiff) {
		return fmt.Errorf("mean of the probe's samples is %v from the test's own conversion, beyond %v", diff, maxMeanDiff)
	}
	return nil
}

// stampPTPEvents asks the NIC to stamp received PTPv2 event frames, what a
// PTP daemon would (the probe itself never changes a NIC's configuration).
func stampPTPEvents(ifname string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetHwTstamp(fd, ifname, &unix.HwTstampConfig{Rx_filter: unix.HWTSTAMP_FILTER_PTP_V2_L2_EVENT}); err != nil {
		return fmt.Errorf("SIOCSHWTSTAMP %s: %w", ifname, err)
	}
	return nil
}

type probe struct {
	cmd *exec.Cmd
	out *bufio.Scanner
}

// startProbe runs `stacktop latency -e nic` on the interface and waits
// for its first report, which comes once the probe is attached.
func startProbe(stacktop, ifname string) (*probe, error) {
	cmd := exec.Command(stacktop, "latency", "-e", "nic", "-i", ifname, "-r", "1s", "--format", "json", "--debug-counters")
	cmd.Stderr = os.Stdout
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &probe{cmd: cmd, out: bufio.NewScanner(stdout)}
	for p.out.Scan() {
		if strings.Contains(p.out.Text(), `"debug_counters"`) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("stacktop ended before its first report: %v", cmd.Wait())
}

// stop ends the probe with SIGINT and returns its final report's nic count
// and sum.
func (p *probe) stop() (int, time.Duration, error) {
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		return 0, 0, err
	}
	var count int
	var sum time.Duration
	for p.out.Scan() {
		var rec struct {
			Hook  string `json:"hook"`
			Count int    `json:"count"`
			SumNs int64  `json:"sum_ns"`
		}
		if json.Unmarshal(p.out.Bytes(), &rec) == nil && rec.Hook == "nic" {
			count, sum = rec.Count, time.Duration(rec.SumNs) // cumulative: the last one counts
		}
	}
	return count, sum, p.cmd.Wait()
}

// send sends frames PTPv2 Sync messages (messageType 0, transportSpecific 0:
// what igb's PTPv2 event filter stamps) to the receiver's address, each once
// the receiver has re-armed the NIC's stamping after the one before.
func send(from, to *net.Interface, rearmed <-chan struct{}) error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(etherPTP)))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	addr := &unix.SockaddrLinklayer{Protocol: htons(etherPTP), Ifindex: from.Index, Halen: 6}
	copy(addr.Addr[:], to.HardwareAddr)
	for i := range frames {
		f := make([]byte, 14+44)
		copy(f[0:6], to.HardwareAddr)
		copy(f[6:12], from.HardwareAddr)
		binary.BigEndian.PutUint16(f[12:], etherPTP)
		ptp := f[14:]
		ptp[1] = 2                                      // versionPTP
		binary.BigEndian.PutUint16(ptp[2:], 44)         // messageLength
		binary.BigEndian.PutUint16(ptp[30:], uint16(i)) // sequenceId
		if err := unix.Sendto(fd, f, 0, addr); err != nil {
			return err
		}
		select {
		case <-rearmed:
		case <-time.After(stampWait):
			return fmt.Errorf("frame %d not received in %s", i, stampWait)
		}
	}
	return nil
}

// receiver is a packet socket on the receiving NIC that gets each frame's
// software and raw hardware stamps, and the NIC's PHC.
type receiver struct {
	fd    int
	clock *hwstamp.Clock
	rearm func()
}

// listen opens the receiver before anything is sent.
//
// QEMU's igb latches TSYNCRXCTL.VALID after stamping a frame and stamps no
// other until RXSATRH is read; Linux's igb driver reads RXSTMPL/H only, so
// under QEMU every frame after the first would go unstamped. The test reads
// RXSATRH through the device's BAR after each frame (hence iomem=relaxed).
func listen(ifc *net.Interface) (*receiver, error) {
	info, err := hwstamp.Inspect(*ifc)
	if err != nil {
		return nil, err
	}
	rearm, err := rxStampRearm(ifc.Name)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(etherPTP)))
	if err != nil {
		return nil, err
	}
	r := &receiver{fd: fd, rearm: rearm}
	flags := unix.SOF_TIMESTAMPING_RX_HARDWARE | unix.SOF_TIMESTAMPING_RAW_HARDWARE |
		unix.SOF_TIMESTAMPING_RX_SOFTWARE | unix.SOF_TIMESTAMPING_SOFTWARE
	if err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(etherPTP), Ifindex: ifc.Index}); err == nil {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING, flags)
	}
	if err == nil {
		r.clock, err = hwstamp.OpenClock(info.PHC)
	}
	if err != nil {
		r.close()
		return nil, err
	}
	rearm()
	return r, nil
}

func (r *receiver) close() {
	unix.Close(r.fd)
	if r.clock != nil {
		r.clock.Close()
	}
}

// receive reads the frames and returns, for each hardware-stamped one, the
// time from its hardware stamp (converted with an offset measured at once)
// to its software stamp.
func (r *receiver) receive(rearmed chan<- struct{}) ([]time.Duration, error) {
	var lats []time.Duration
	buf, oob := make([]byte, 2048), make([]byte, 512)
	for range frames {
		_, oobn, _, _, err := unix.Recvmsg(r.fd, buf, oob, 0)
		if err != nil {
			return nil, err
		}
		sw, hw, err := stamps(oob[:oobn])
		if err != nil {
			return nil, err
		}
		if hw != 0 {
			samples, err := r.clock.Read()
			if err != nil {
				return nil, err
			}
			off, err := hwstamp.Best(samples)
			if err != nil {
				return nil, err
			}
			lats = append(lats, time.Duration(sw-(hw+off.Ns)))
		}
		r.rearm()
		rearmed <- struct{}{}
	}
	return lats, nil
}

// stamps returns the software and raw hardware stamps of SCM_TIMESTAMPING.
func stamps(oob []byte) (sw, hw int64, err error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, 0, err
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPING && len(m.Data) >= 48 {
			ts := func(i int) int64 {
				return int64(binary.NativeEndian.Uint64(m.Data[i*16:]))*1e9 + int64(binary.NativeEndian.Uint64(m.Data[i*16+8:]))
			}
			return ts(0), ts(2), nil
		}
	}
	return 0, 0, errors.New("a frame without SCM_TIMESTAMPING")
}

var sink uint32

// rxStampRearm maps the NIC's registers and returns a function that reads
// RXSATRH (see receive).
func rxStampRearm(ifname string) (func(), error) {
	f, err := os.OpenFile("/sys/class/net/"+ifname+"/device/resource0", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	regs, err := unix.Mmap(int(f.Fd()), 0, 0x10000, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s's registers: %w", ifname, err)
	}
	return func() { sink += atomic.LoadUint32((*uint32)(unsafe.Pointer(&regs[rxsatrh]))) }, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
