// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/stacktop/stacktop/internal/attach"
	"github.com/stacktop/stacktop/internal/features"
)

// ReadClock is where a TCP read's "now" comes from on this kernel.
type ReadClock struct {
	Cached bool   `json:"cached"` // the socket's tcp_clock_cache (the BPF constant tcp_read_clock), else a clock read
	Why    string `json:"why"`    // the check's finding
}

// tcpReadClock checks once per process whether a TCP read's "now" may be
// the socket's tcp_clock_cache instead of a clock read. Up to 6.18
// tcp_recvmsg refreshes that field after every copy (tcp_rcv_space_adjust),
// so when a read returns it holds the time of its last copy. 6.19 stopped
// that refresh; there the field is as old as the socket's last packet or
// ACK, and would under-report exactly the reads that waited. A kernel
// version says too little (the change can be backported), so the kernel is
// asked: see checkTCPReadClock. Any doubt keeps the clock read, which is
// right everywhere.
var tcpReadClock = sync.OnceValue(func() ReadClock {
	fresh, err := checkTCPReadClock()
	switch {
	case err != nil:
		slog.Info("TCP reads read the clock: the check of the socket's cached clock failed", "err", err)
		return ReadClock{Why: "a clock read per read: the check of the socket's cached clock failed: " + err.Error()}
	case !fresh:
		return ReadClock{Why: "a clock read per read: this kernel does not refresh the socket's cached clock (tcp_clock_cache) at reads"}
	}
	return ReadClock{Cached: true, Why: "the socket's cached clock (tcp_clock_cache), which this kernel refreshes at every copy of a read"}
})

// TCPReadClock says where tcp-socket-read takes "now" from on this kernel,
// checking it first if no tracer has (root only).
func TCPReadClock() ReadClock { return tcpReadClock() }

// Values of the check, chosen far apart: a refreshed field is well under a
// millisecond old when the read returns (64-512 ns under load here, tens of
// microseconds in an emulated guest); a stale one is the pause's age.
const (
	readClockPause = 10 * time.Millisecond
	readClockFresh = 2 * time.Millisecond
	readClockTries = 3
)

// readClockCheck is the check's program, watching the reads of one
// connection, the one with these local and remote ports
// (Program.Constants): a hook of its own, so that the attach engine loads
// it like any other, at sock_recv_length where that tracepoint exists
// (6.4+), else at tcp_recvmsg's exit.
func readClockCheck(local, remote uint16) attach.Hook {
	program := func(name string) attach.Program {
		p := tracing(name, "read")
		p.Constants = map[string]any{latencyVarReadClockLport: local, latencyVarReadClockRport: remote}
		return p
	}
	return attach.Hook{Name: "tcp read clock check", Backends: []attach.Backend{
		tracepoint(program(latencyProgTpReadClockCheck)),
		fentry(program(latencyProgFexitReadClockCheck)),
	}}
}

// checkTCPReadClock makes a loopback connection and sends two bytes; reads
// one, pauses, then reads the other, with the check's program watching the
// connection's reads: the second read copies without any packet arriving,
// so tcp_clock_cache is fresh when it returns only if the kernel refreshed
// it at the copy — or if the read sent a segment (an ACK refreshes it on
// every kernel), which the socket's segs_out shows: such a try does not
// count.
func checkTCPReadClock() (bool, error) {
	client, server, err := loopbackTCP()
	if err != nil {
		return false, err
	}
	defer server.Close()
	defer client.Close()
	spec, err := loadLatency()
	if err != nil {
		return false, err
	}
	check := readClockCheck(port(server.LocalAddr()), port(server.RemoteAddr()))
	engine, err := attach.Load(attach.Only(spec, check), attach.Netns{})
	if err != nil {
		return false, err
	}
	defer engine.Close()
	var maps struct {
		ReadClockSamples *ebpf.Map `ebpf:"read_clock_samples"`
	}
	if err := engine.AssignMaps(&maps); err != nil {
		return false, err
	}
	if _, err := engine.Attach(&check, features.Auto); err != nil {
		return false, err
	}

	read := func() (latencyReadClockSample, error) {
		var b [1]byte
		var s latencyReadClockSample
		if _, err := server.Read(b[:]); err != nil {
			return s, err
		}
		return s, maps.ReadClockSamples.Lookup(uint32(0), &s)
	}
	for range readClockTries {
		if _, err := client.Write([]byte{1, 2}); err != nil {
			return false, err
		}
		first, err := read()
		if err != nil {
			return false, err
		}
		if first.SegsOut == 0 { // a server socket has sent its SYN-ACK
			return false, errors.New("the check's program saw no read")
		}
		time.Sleep(readClockPause)
		second, err := read()
		if err != nil {
			return false, err
		}
		if second.SegsOut == first.SegsOut {
			return time.Duration(second.Age) < readClockFresh, nil
		}
	}
	return false, errors.New("every try sent a segment during the read")
}

func port(a net.Addr) uint16 { return uint16(a.(*net.TCPAddr).Port) }

// loopbackTCP is both ends of a new TCP connection over 127.0.0.1, in the
// calling thread's namespace.
func loopbackTCP() (client, server net.Conn, err error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	if client, err = net.Dial("tcp4", ln.Addr().String()); err != nil {
		return nil, nil, err
	}
	if server, err = ln.Accept(); err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, server, nil
}
