// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/connfilter"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/testenv"
	"github.com/stacktop/stacktop/internal/testenv/reexec"
)

// TestLiveCounters: one blocking multi-megabyte write from the host to a
// peer behind a 2 Mbit/s tbf, which drops 2 % of what arrives at random
// (iptables' statistic match: this kernel has no netem). While the
// write blocks, bytes_out grows refresh by refresh, rtt_us stays within a
// factor 2 of what `ss -tin` reads in the same second, and retrans within
// 10 % of the values ss reads just before and just after the snapshot.
func TestLiveCounters(t *testing.T) {
	tc := testenv.RequireTool(t, "tc")
	ss := testenv.RequireTool(t, "ss")
	ip := testenv.RequireTool(t, "ip")
	iptables := testenv.RequireTool(t, "iptables")
	p := testenv.NewPeer(t, "stc-live", 60)
	for _, cmd := range [][]string{
		{tc, "qdisc", "add", "dev", p.HostIf, "root", "tbf", "rate", "2mbit", "burst", "32kbit", "latency", "400ms"},
		{ip, "netns", "exec", p.Name, iptables, "-A", "INPUT", "-p", "tcp", "-m", "statistic",
			"--mode", "random", "--probability", "0.02", "-j", "DROP"},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
	}
	tr := openTracker(t, Config{})
	l := p.ServeTCP(t, addrPort(p.PeerIP4, 0), func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	port := l.Addr().(*net.TCPAddr).Port
	c, err := net.Dial("tcp", addrPort(p.PeerIP4, port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A small send buffer keeps the write blocked while the link drains it.
	if err := c.(*net.TCPConn).SetWriteBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	local := uint16(c.LocalAddr().(*net.TCPAddr).Port)
	const total = 3_000_000
	done := make(chan error, 1)
	go func() { _, err := c.Write(make([]byte, total)); done <- err }()

	var outs []uint64
	var rttChecked, retransChecked int
	for blocked := true; blocked; {
		time.Sleep(time.Second)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("write: %v", err)
			}
			blocked = false
		default:
		}
		// ss just before and just after the snapshot: retransmits are
		// counted up, so the snapshot's lie between the two.
		srttBefore, retransBefore := ssInfo(t, ss, p.PeerIP4.String(), local)
		snap, err := tr.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		srttAfter, retransAfter := ssInfo(t, ss, p.PeerIP4.String(), local)
		// By both ends: another package's test may hold the same local
		// port towards another address.
		rs := find(snap.Records, func(r *conn.Record) bool {
			return r.Proto == "tcp" && r.LocalPort == local && r.RemoteAddr == p.PeerIP4
		})
		if len(rs) != 1 {
			t.Fatalf("%d records of the sending socket, want 1:\n%s", len(rs), dump(snap.Records))
		}
		r := rs[0]
		t.Logf("bytes_out %d rtt_us %d (ss %d..%d) retrans %d (ss %d..%d)", r.BytesOut, r.RTTus, srttBefore, srttAfter,
			r.Retrans, retransBefore, retransAfter)
		if !blocked {
			break
		}
		outs = append(outs, r.BytesOut)
		// Behind tbf the smoothed RTT swings by a factor 5 within a
		// second as the queue fills and drains: the snapshot's must be
		// within a factor 2 of what ss read just before or just after it.
		if srttBefore > 0 && srttAfter > 0 {
			rttChecked++
			near := func(srtt uint32) bool { return r.RTTus >= srtt/2 && r.RTTus <= srtt*2 }
			if !near(srttBefore) && !near(srttAfter) {
				t.Errorf("rtt_us %d, ss says %d µs before and %d after: not within a factor 2 of either",
					r.RTTus, srttBefore, srttAfter)
			}
		}
		if retransAfter > 0 {
			retransChecked++
			// 10 % of slack below and above: retransmits between the snapshots.
			if r.Retrans*10 < retransBefore*9 || r.Retrans*10 > retransAfter*11 {
				t.Errorf("retrans %d, ss says %d before and %d after the snapshot", r.Retrans, retransBefore, retransAfter)
			}
		}
	}
	if len(outs) < 4 {
		t.Fatalf("the write blocked for only %d refreshes; the link is too fast for the test", len(outs))
	}
	for i := 1; i < len(outs); i++ {
		if outs[i] <= outs[i-1] {
			t.Errorf("bytes_out did not grow from refresh %d to %d while the write blocked: %v", i-1, i, outs)
		}
	}
	if rttChecked == 0 || retransChecked == 0 {
		t.Errorf("compared rtt %d times and retransmits %d times with ss; want both", rttChecked, retransChecked)
	}
	if outs[len(outs)-1] > total {
		t.Errorf("bytes_out %d beyond the %d written", outs[len(outs)-1], total)
	}
}

var (
	ssRTT     = regexp.MustCompile(`\brtt:([0-9.]+)/`)
	ssRetrans = regexp.MustCompile(`\bretrans:[0-9]+/([0-9]+)`)
)

// ssInfo returns the smoothed RTT (µs) and total retransmits `ss -tin`
// reports for the connection from local port to dst.
func ssInfo(t *testing.T, ss, dst string, local uint16) (srttUS, retrans uint32) {
	t.Helper()
	out, err := exec.Command(ss, "-tinH", "dst", dst, "sport", "= :"+strconv.Itoa(int(local))).Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	if m := ssRTT.FindSubmatch(out); m != nil {
		ms, _ := strconv.ParseFloat(string(m[1]), 64)
		srttUS = uint32(ms * 1000)
	}
	if m := ssRetrans.FindSubmatch(out); m != nil {
		n, _ := strconv.ParseUint(string(m[1]), 10, 32)
		retrans = uint32(n)
	}
	return srttUS, retrans
}

// TestUDPReceiveDrops: 1,000 datagrams of 1,200 bytes to a socket with a
// 16 KiB receive buffer whose reader reads only after they all arrived.
// bytes_in and packets_in are what the reader read; drops_in is what the
// namespace's UdpRcvbufErrors grew by.
func TestUDPReceiveDrops(t *testing.T) {
	const n, size = 1000, 1200
	p := testenv.NewPeer(t, "stc-drops", 61)
	tr := openTracker(t, Config{})
	if !hookAttached(tr, "udp-drops") {
		testenv.Unsupported(t, "udp_fail_queue_rcv_skb has no skb argument before 6.10: drops stay in bytes_in")
	}
	var srv *net.UDPConn
	var before uint64
	if err := p.Do(func() (err error) {
		if srv, err = net.ListenUDP("udp", &net.UDPAddr{IP: p.PeerIP4.AsSlice()}); err != nil {
			return err
		}
		if err := srv.SetReadBuffer(16 << 10); err != nil {
			return err
		}
		before, err = udpRcvbufErrors()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	port := uint16(srv.LocalAddr().(*net.UDPAddr).Port)
	client, err := net.DialUDP("udp", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for range n {
		if _, err := client.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the veth peer's backlog delivers them
	var read, datagrams uint64
	buf := make([]byte, 2*size)
	for {
		_ = srv.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		k, err := srv.Read(buf)
		if err != nil {
			break
		}
		read += uint64(k)
		datagrams++
	}
	var after uint64
	if err := p.Do(func() (err error) { after, err = udpRcvbufErrors(); return err }); err != nil {
		t.Fatal(err)
	}
	t.Logf("read %d datagrams (%d bytes); UdpRcvbufErrors grew by %d", datagrams, read, after-before)
	if datagrams == 0 || datagrams == n || after-before == 0 {
		t.Fatalf("the receive buffer did not drop (read %d of %d): the test proves nothing", datagrams, n)
	}
	h := poll(t, tr, func(h *history) bool {
		return len(find(h.last.Records, func(r *conn.Record) bool { return r.Proto == "udp" && r.LocalPort == port })) == 1
	})
	r := find(h.last.Records, func(r *conn.Record) bool { return r.Proto == "udp" && r.LocalPort == port })[0]
	if r.BytesIn != read || r.PacketsIn != datagrams || r.DropsIn != after-before {
		t.Errorf("bytes_in %d, packets_in %d, drops_in %d; want %d, %d, %d", r.BytesIn, r.PacketsIn, r.DropsIn,
			read, datagrams, after-before)
	}
}

// udpRcvbufErrors reads UdpRcvbufErrors of the calling thread's network
// namespace (/proc/thread-self/net/snmp: the thread's, not the process's).
func udpRcvbufErrors() (uint64, error) {
	f, err := os.Open("/proc/thread-self/net/snmp")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var names []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 0 || fields[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		if i := slices.Index(names, "RcvbufErrors"); i > 0 && i < len(fields) {
			return strconv.ParseUint(fields[i], 10, 64)
		}
	}
	return 0, fmt.Errorf("no Udp RcvbufErrors in /proc/thread-self/net/snmp")
}

// TestStartupUnderChurn: trackers started while 200 connections a second
// come and go never report a connection closed with no owner, no bytes
// and not marked partial: what they could not see from its start is
// partial, the rest is whole.
func TestStartupUnderChurn(t *testing.T) {
	const request = 100
	p := testenv.NewPeer(t, "stc-churn", 62)
	l := tcpServer(t, p, addrPort(p.PeerIP4, 0), request, request)
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	stop := make(chan struct{})
	churned := make(chan int)
	go func() {
		n := 0
		defer func() { churned <- n }()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			c, err := net.Dial("tcp", addrPort(p.PeerIP4, int(port)))
			if err != nil {
				continue
			}
			_, _ = c.Write(make([]byte, request))
			_, _ = io.ReadFull(c, make([]byte, request))
			c.Close()
			n++
		}
	}()
	for range 3 {
		tr := openTracker(t, Config{})
		h := &history{}
		var lost uint64
		for range 5 {
			time.Sleep(200 * time.Millisecond)
			s, err := tr.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			lost = s.Lost
			h.closed = append(h.closed, find(s.Records, func(r *conn.Record) bool { return r.Event == conn.Closed })...)
		}
		ours := 0
		var wrong []string
		for _, r := range h.closed {
			if r.Proto != "tcp" || (r.LocalPort != port && r.RemotePort != port) {
				continue
			}
			ours++
			if !r.Partial && (r.PID == 0 || r.BytesIn+r.BytesOut == 0) {
				wrong = append(wrong, fmt.Sprintf("closed, not partial, but owner %d/%q and bytes %d/%d: %+v", r.PID, r.Comm, r.BytesIn, r.BytesOut, r))
			}
		}
		if ours == 0 {
			t.Fatal("no connection of the churn closed while a tracker ran")
		}
		// A state change whose program run the kernel skipped (counted in
		// Lost) can miss an owner; only the emulated guests skip runs.
		testenv.RequireExact(t, wrong, lost)
		tr.Close()
	}
	close(stop)
	t.Logf("%d connections churned", <-churned)
}

// TestNginxWorkerOwners: nginx with a master and two workers, started
// before the tracker. The master listens, the workers accept: every
// accepted connection is owned by a worker, never by the master.
func TestNginxWorkerOwners(t *testing.T) {
	nginx := testenv.RequireTool(t, "nginx")
	testenv.RequireRoot(t)
	dir := t.TempDir()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`worker_processes 2;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 128; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	server { listen 127.0.0.1:%[2]d; location / { return 200 "ok\n"; } }
}
`, dir, port)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nginx, "-e", filepath.Join(dir, "error.log"), "-p", dir, "-c", conf)
	cmd.Stderr = os.Stderr
	// Its own process group, killed whole: workers outlive a killed master.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	master := uint32(cmd.Process.Pid)
	var workers []uint32
	testenv.Eventually(t, 10*time.Second, "nginx's workers", func() error {
		if workers = children(master); len(workers) < 2 {
			return fmt.Errorf("%d started, want 2", len(workers))
		}
		return nil
	})
	tr := openTracker(t, Config{})
	const conns = 20
	var held []net.Conn
	for range conns {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	for _, c := range held {
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	accepted := func(r *conn.Record) bool {
		return r.Proto == "tcp" && r.LocalPort == uint16(port) && r.State == "ESTABLISHED"
	}
	h := poll(t, tr, func(h *history) bool { return len(find(h.last.Records, accepted)) == conns })
	for _, r := range find(h.last.Records, accepted) {
		if !slices.Contains(workers, r.PID) {
			t.Errorf("accepted connection owned by %d/%s; want a worker %v (master %d)", r.PID, r.Comm, workers, master)
		}
	}
	for _, c := range held {
		c.Close()
	}
}

// children returns the PIDs whose parent is pid.
func children(pid uint32) []uint32 {
	var out []uint32
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		i := strings.LastIndexByte(string(b), ')')
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(int(pid)) {
			child, _ := strconv.ParseUint(filepath.Base(filepath.Dir(path)), 10, 32)
			out = append(out, uint32(child))
		}
	}
	return out
}

// hookAttached reports whether the tracker attached a program for hook.
func hookAttached(tr *Tracker, hook string) bool { return hookBackend(tr, hook) != "" }

// hookBackend says which backend the tracker attached the hook with ("" for none).
func hookBackend(tr *Tracker, hook string) features.Backend {
	for _, c := range tr.Choices() {
		if c.Hook == hook {
			return c.Backend
		}
	}
	return ""
}

// TestSplicedBytes: an echo server that copies with io.Copy between its
// connection's two directions, which Go does with splice(2) (reading the
// socket into a pipe, no recvmsg): both ends still count every byte.
func TestSplicedBytes(t *testing.T) {
	const n = 1 << 20
	p := testenv.NewPeer(t, "stc-splice", 63)
	tr := openTracker(t, Config{})
	l := p.ServeTCP(t, addrPort(p.PeerIP4, 0), func(c net.Conn) { _, _ = io.Copy(c, c) })
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	c, err := net.Dial("tcp", addrPort(p.PeerIP4, int(port)))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = c.Write(make([]byte, n))
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	if got, err := io.Copy(io.Discard, c); err != nil || got != n {
		t.Fatalf("echoed %d bytes (%v), want %d", got, err, n)
	}
	c.Close()
	ours := func(r *conn.Record) bool {
		return r.Event == conn.Closed && r.Proto == "tcp" && (r.LocalPort == port || r.RemotePort == port)
	}
	h := poll(t, tr, func(h *history) bool { return len(find(h.closed, ours)) == 2 })
	for _, r := range find(h.closed, ours) {
		if r.BytesIn != n || r.BytesOut != n {
			t.Errorf("%s:%d: bytes in/out %d/%d, want %d/%d", r.LocalAddr, r.LocalPort, r.BytesIn, r.BytesOut, n, n)
		}
	}
}

// TestPreexistingUDPOwner: a UDP socket created before the tracker started
// (so its creation was not seen) has its owner from the start-up listing.
func TestPreexistingUDPOwner(t *testing.T) {
	p := testenv.NewPeer(t, "stc-udppre", 64)
	port := udpServer(t, p, 10)
	tr := openTracker(t, Config{})
	runHelperProc(t, "udp", "STC_ADDR="+addrPort(p.PeerIP4, int(port)), "STC_SEND=10", "STC_COUNT=2")
	server := func(r *conn.Record) bool { return r.Proto == "udp" && r.LocalPort == port }
	h := poll(t, tr, func(h *history) bool { return len(find(h.last.Records, server)) == 2 }) // one per peer
	for _, r := range find(h.last.Records, server) {
		if r.PID != uint32(os.Getpid()) || r.Netns != uint32(p.Inode()) {
			t.Errorf("server flow owned by %d in namespace %d, want %d in %d", r.PID, r.Netns, os.Getpid(), p.Inode())
		}
	}
}

// TestProtocolHooks: --tcp attaches no UDP program (the cgroup_skb ones
// would see every packet) and --udp no TCP program; either still takes
// snapshots.
func TestProtocolHooks(t *testing.T) {
	for _, c := range []struct {
		opts   connfilter.Options
		absent string
	}{{connfilter.Options{TCP: true}, "udp-"}, {connfilter.Options{UDP: true}, "tcp-"}} {
		f, err := c.opts.Compile()
		if err != nil {
			t.Fatal(err)
		}
		tr := openTracker(t, Config{Filter: f})
		for _, ch := range tr.Choices() {
			if strings.HasPrefix(ch.Hook, c.absent) {
				t.Errorf("%+v: hook %s attached", c.opts, ch.Hook)
			}
		}
		if len(tr.Choices()) == 0 {
			t.Errorf("%+v: nothing attached", c.opts)
		}
		if _, err := tr.Snapshot(); err != nil {
			t.Errorf("%+v: Snapshot: %v", c.opts, err)
		}
	}
}

// TestConnectingSocketHasItsPort: connect() moves a socket into SYN_SENT
// before it binds its local port, so the state change sees port 0. A
// connection whose SYNs go unanswered must show up under the port it got,
// never under port 0 (before 6.11, with no refresh iterator to read the
// port, it shows up only once it is established).
func TestConnectingSocketHasItsPort(t *testing.T) {
	ip := testenv.RequireTool(t, "ip")
	iptables := testenv.RequireTool(t, "iptables")
	p := testenv.NewPeer(t, "stc-syns", 65)
	if out, err := exec.Command(ip, "netns", "exec", p.Name, iptables, "-A", "INPUT", "-p", "tcp", "--syn", "-j", "DROP").CombinedOutput(); err != nil {
		t.Fatalf("iptables: %v: %s", err, out)
	}
	tr := openTracker(t, Config{})
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	const remotePort = 9
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: remotePort, Addr: p.PeerIP4.As4()}); err != unix.EINPROGRESS {
		t.Fatalf("connect: %v, want EINPROGRESS", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	local := uint16(sa.(*unix.SockaddrInet4).Port)
	snap, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var ours []conn.Record
	for _, r := range snap.Records {
		if r.RemoteAddr == p.PeerIP4 && r.RemotePort == remotePort {
			ours = append(ours, r)
		}
	}
	want := 0
	if hookAttached(tr, "tcp-counters") {
		want = 1
	}
	if len(ours) != want {
		t.Fatalf("%d records of the connecting socket, want %d: %+v", len(ours), want, ours)
	}
	for _, r := range ours {
		if r.LocalPort != local || r.State != "SYN_SENT" {
			t.Errorf("record %s:%d %s, want local port %d in SYN_SENT", r.LocalAddr, r.LocalPort, r.State, local)
		}
	}
}

// TestAcceptedByAnotherProcess: a listener this process made, accepted from by
// another process (a pre-forking server's worker): the accepted socket
// belongs to the process that accepted it — or, where tcp-accept is
// refused, to the listener's until its process closes it. A refresh while
// the connection waits in the accept queue shows the listener's owner; the
// next one, after the worker accepted, the worker.
func TestAcceptedByAnotherProcess(t *testing.T) {
	tr := openTracker(t, Config{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lf, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	worker := reexec.CommandAs(t, helperComm, "accept")
	worker.ExtraFiles = []*os.File{lf}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lport, cport := uint16(l.Addr().(*net.TCPAddr).Port), uint16(c.LocalAddr().(*net.TCPAddr).Port)
	if got := acceptedOwner(t, tr, lport, cport); got != uint32(os.Getpid()) {
		t.Errorf("before the worker accepted: accepted socket owned by %d, want the listener's %d", got, os.Getpid())
	}
	// The worker prints the port of the connection it accepted.
	if _, cport := startPortHelper(t, worker); cport != c.LocalAddr().(*net.TCPAddr).Port {
		t.Fatalf("the worker accepted a connection from port %d, not ours", cport)
	}
	want := worker.Process.Pid
	if !hookAttached(tr, "tcp-accept") {
		want = os.Getpid()
	}
	if got := acceptedOwner(t, tr, lport, cport); got != uint32(want) {
		t.Errorf("accepted socket owned by %d, want %d (tcp-accept attached: %v)", got, want, hookAttached(tr, "tcp-accept"))
	}
}

// acceptedOwner takes a snapshot and returns the owner of the socket on
// local port lport connected from port cport.
func acceptedOwner(t *testing.T, tr *Tracker, lport, cport uint16) uint32 {
	t.Helper()
	snap, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range snap.Records {
		if r.LocalPort == lport && r.RemotePort == cport {
			return r.PID
		}
	}
	t.Fatalf("no record of the accepted socket (local port %d, remote %d) in %d records", lport, cport, len(snap.Records))
	return 0
}

// refreshBackend is the backend tcp-counters must have on this kernel:
// conns_refresh where it can run (refreshRuns), else the TCP iterator.
func refreshBackend() features.Backend {
	if refreshRuns() != nil {
		return iteratorPath
	}
	return runPath
}

// TestCountersOfOpenConnections: the refresh reads the kernel's counters of
// connections that made no state change since they were established, on
// both ends, in two network namespaces (the client here, the server in a
// peer's): after every exchange each end's record shows exactly what moved.
// Every kernel of the matrix refreshes (refreshBackend).
// TestLiveCounters needs tc, which the guests lack.
func TestCountersOfOpenConnections(t *testing.T) {
	p := testenv.NewPeer(t, "stc-open", 66)
	tr := openTracker(t, Config{})
	if got, want := hookBackend(tr, "tcp-counters"), refreshBackend(); got != want {
		t.Fatalf("tcp-counters by %q, want %q: %+v", got, want, tr.Choices())
	}
	exchanges := []struct{ up, down int }{{3000, 1000}, {500, 0}, {1, 70_000}} // each waits for the client's bytes
	served := make(chan error, 1)
	l := p.ServeTCP(t, addrPort(p.PeerIP4, 0), func(c net.Conn) {
		for _, x := range exchanges {
			if _, err := io.ReadFull(c, make([]byte, x.up)); err != nil {
				served <- err
				return
			}
			if _, err := c.Write(make([]byte, x.down)); err != nil {
				served <- err
				return
			}
			served <- nil
		}
		_, _ = io.Copy(io.Discard, c)
	})
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	c, err := net.Dial("tcp4", addrPort(p.PeerIP4, int(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := uint16(c.LocalAddr().(*net.TCPAddr).Port)
	var up, down uint64
	for i, x := range exchanges {
		if _, err := c.Write(make([]byte, x.up)); err != nil {
			t.Fatal(err)
		}
		if err := <-served; err != nil {
			t.Fatalf("server: %v", err)
		}
		if _, err := io.ReadFull(c, make([]byte, x.down)); err != nil {
			t.Fatal(err)
		}
		up, down = up+uint64(x.up), down+uint64(x.down)
		snap, err := tr.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, end := range []struct {
			name    string
			local   uint16
			in, out uint64
		}{{"client", local, down, up}, {"server", port, up, down}} {
			rs := find(snap.Records, func(r *conn.Record) bool {
				return r.Proto == "tcp" && r.LocalPort == end.local && r.State == "ESTABLISHED" &&
					(r.RemotePort == port || r.RemotePort == local)
			})
			if len(rs) != 1 {
				t.Fatalf("exchange %d: %d %s records, want 1:\n%s", i, len(rs), end.name, dump(snap.Records))
			}
			if r := rs[0]; r.BytesIn != end.in || r.BytesOut != end.out {
				t.Errorf("exchange %d: %s bytes in/out %d/%d, want %d/%d", i, end.name, r.BytesIn, r.BytesOut, end.in, end.out)
			}
		}
	}
}

// TestRefreshDuringTransfer: snapshots taken back to back while one
// connection moves data both ways, in 16 KiB calls that the application
// counts as they return. The refresh reads the sockets without their locks,
// so it can meet an update half done (bpf/tcp.h, refresh_entry): every
// snapshot's bytes on each end must still lie between what the application
// had moved before the snapshot and what it had moved after it (plus the
// call in flight, which the kernel counts as it copies), and never go down.
func TestRefreshDuringTransfer(t *testing.T) {
	const chunk = 16 << 10
	p := testenv.NewPeer(t, "stc-xfer", 67)
	tr := openTracker(t, Config{})
	// One goroutine per direction and end; each counts what its calls moved.
	var sent, received [2]atomic.Uint64 // [0] the client's, [1] the server's
	stop := make(chan struct{})
	var wg sync.WaitGroup
	move := func(c net.Conn, end int) {
		wg.Add(2)
		go func() {
			defer wg.Done()
			buf := make([]byte, chunk)
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := c.Write(buf)
				sent[end].Add(uint64(n))
				if err != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			buf := make([]byte, chunk)
			for {
				n, err := c.Read(buf)
				received[end].Add(uint64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	accepted := make(chan net.Conn, 1)
	l := p.ServeTCP(t, addrPort(p.PeerIP4, 0), func(c net.Conn) {
		accepted <- c
		<-stop
	})
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	c, err := net.Dial("tcp4", addrPort(p.PeerIP4, int(port)))
	if err != nil {
		t.Fatal(err)
	}
	local := uint16(c.LocalAddr().(*net.TCPAddr).Port)
	move(c, 0)
	move(<-accepted, 1)
	defer func() {
		close(stop)
		c.Close()
		wg.Wait()
	}()

	var last [2]struct{ in, out uint64 }
	snapshots := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); snapshots++ {
		var before [2]struct{ in, out uint64 }
		for end := range before {
			before[end].in, before[end].out = received[end].Load(), sent[end].Load()
		}
		for end, r := range bothEnds(t, tr, local, port, fmt.Sprintf("snapshot %d", snapshots)) {
			in, out := received[end].Load()+chunk, sent[end].Load()+chunk
			if r.BytesIn < before[end].in || r.BytesIn > in || r.BytesOut < before[end].out || r.BytesOut > out {
				t.Fatalf("snapshot %d, end %d: bytes in/out %d/%d, want within %d–%d / %d–%d",
					snapshots, end, r.BytesIn, r.BytesOut, before[end].in, in, before[end].out, out)
			}
			if r.BytesIn < last[end].in || r.BytesOut < last[end].out {
				t.Fatalf("snapshot %d, end %d: bytes in/out %d/%d went down from %d/%d",
					snapshots, end, r.BytesIn, r.BytesOut, last[end].in, last[end].out)
			}
			last[end].in, last[end].out = r.BytesIn, r.BytesOut
		}
	}
	if last[0].in == 0 || last[1].in == 0 {
		t.Fatalf("nothing moved in %d snapshots: %+v", snapshots, last)
	}
	t.Logf("%d snapshots; client in/out %d/%d bytes", snapshots, last[0].in, last[0].out)
}

// bothEnds takes a snapshot and returns the records of a TCP connection's
// two ends, the client's (local port client) and the server's, failing
// unless each has one; when names the snapshot.
func bothEnds(t *testing.T, tr *Tracker, client, server uint16, when string) [2]conn.Record {
	t.Helper()
	snap, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var ends [2]conn.Record
	for end, ports := range [2][2]uint16{{client, server}, {server, client}} {
		rs := find(snap.Records, func(r *conn.Record) bool {
			return r.Proto == "tcp" && r.LocalPort == ports[0] && r.RemotePort == ports[1]
		})
		if len(rs) != 1 {
			t.Fatalf("%s: %d records of end %d, want 1:\n%s", when, len(rs), end, dump(snap.Records))
		}
		ends[end] = rs[0]
	}
	return ends
}

// TestEntryOutlivingItsSocket: an entry whose socket is gone without its
// destruction being seen (both destruction programs' runs skipped, which
// the loss counter counts) is reported closed once, with its counters as
// of the last refresh, and removed from the table; the refresh tells it by
// the cookie of the socket at its address. Made here by copying a live
// connection's entry under a cookie no socket has.
func TestEntryOutlivingItsSocket(t *testing.T) {
	tr := openTracker(t, Config{})
	if b := hookBackend(tr, "tcp-counters"); b != runPath {
		testenv.Unsupported(t, "tcp-counters by %q: only conns_refresh reads the sockets through their entries", b)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := uint16(c.LocalAddr().(*net.TCPAddr).Port)
	snap, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	rs := find(snap.Records, func(r *conn.Record) bool { return r.Proto == "tcp" && r.LocalPort == local })
	if len(rs) != 1 {
		t.Fatalf("%d records of the connection's client end, want 1:\n%s", len(rs), dump(snap.Records))
	}
	var ghost connsConn
	if err := tr.objs.Conns.Lookup(rs[0].Cookie, &ghost); err != nil {
		t.Fatal(err)
	}
	ghost.Cookie += 1 << 40
	if err := tr.objs.Conns.Update(ghost.Cookie, &ghost, ebpf.UpdateNoExist); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if snap, err = tr.Snapshot(); err != nil {
			t.Fatal(err)
		}
		var ghosts, live []conn.Record
		for _, r := range find(snap.Records, func(r *conn.Record) bool { return r.Proto == "tcp" && r.LocalPort == local }) {
			if r.Cookie == ghost.Cookie {
				ghosts = append(ghosts, r)
			} else {
				live = append(live, r)
			}
		}
		if len(live) != 1 || live[0].Event == conn.Closed {
			t.Errorf("snapshot %d: the connection itself: %s", i, dump(live))
		}
		want := 1 - i // reported closed once
		if len(ghosts) != want || want == 1 && (ghosts[0].Event != conn.Closed || ghosts[0].State != "CLOSE") {
			t.Errorf("snapshot %d: %d records of the entry without its socket, want %d closed:\n%s", i, len(ghosts), want, dump(ghosts))
		}
	}
	var left connsConn
	if err := tr.objs.Conns.Lookup(ghost.Cookie, &left); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("the entry without its socket is still in the table (%v): %+v", err, left)
	}
}

// TestTornCopyNotCounted: a copy of a socket whose pairs' bases differ from
// its entry's, which is what a copy caught between the two stores of an
// update shows (bpf/tcp.h), is not counted by the refresh — conns_refresh,
// or conns_refresh_netns where the kernel refuses it (5.10), which writes
// the table: the connection shows what the last refresh showed, and the
// new bases count once two refreshes in a row saw them, at every refresh
// after. Made by shifting the receive base in the server end's entry while
// the connection is idle, then sending to it; the client end, untouched,
// shows that each refresh ran.
func TestTornCopyNotCounted(t *testing.T) {
	tr := openTracker(t, Config{})
	if b := hookBackend(tr, "tcp-counters"); b == "" {
		testenv.Unsupported(t, "tcp-counters refused: %+v", tr.Choices())
	}
	done := make(chan struct{})
	defer close(done)
	accepted := make(chan net.Conn, 1)
	l := testenv.ServeLoopbackTCP(t, func(s net.Conn) { accepted <- s; <-done })
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	port, local := uint16(l.Addr().(*net.TCPAddr).Port), uint16(c.LocalAddr().(*net.TCPAddr).Port)
	var sent uint64
	send := func(n int) {
		t.Helper()
		if _, err := c.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		sent += uint64(n)
	}
	send(1000)
	server := bothEnds(t, tr, local, port, "before")[1]
	if server.BytesIn != sent {
		t.Fatalf("before: the server end read %d bytes, want %d", server.BytesIn, sent)
	}
	var e connsConn
	if err := tr.objs.Conns.Lookup(server.Cookie, &e); err != nil {
		t.Fatal(err)
	}
	e.RcvBase++
	if err := tr.objs.Conns.Update(server.Cookie, &e, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name string
		send int
		in   uint64 // what the server end shows
	}{{"torn", 500, 1000}, {"confirmed", 0, 1500}, {"after", 250, 1750}} {
		send(step.send)
		got := bothEnds(t, tr, local, port, step.name)
		if got[0].BytesOut != sent || got[1].BytesIn != step.in {
			t.Errorf("%s: the client wrote %d bytes and the server read %d, want %d and %d",
				step.name, got[0].BytesOut, got[1].BytesIn, sent, step.in)
		}
	}
}

// TestNetnsNewOnlyForTheIterator: a new connection notes its network
// namespace in netns_new only where conns_refresh_netns refreshes, which
// reads it; elsewhere the map has one entry, and nothing writes it.
func TestNetnsNewOnlyForTheIterator(t *testing.T) {
	tr := openTracker(t, Config{})
	iterates := hookBackend(tr, "tcp-counters") == iteratorPath
	spec, err := loadConns()
	if err != nil {
		t.Fatal(err)
	}
	size := uint32(1)
	if iterates {
		size = spec.Maps[connsMapNetnsNew].MaxEntries
	}
	if got := tr.objs.NetnsNew.MaxEntries(); got != size {
		t.Errorf("netns_new has %d entries, want %d (tcp-counters by %q)", got, size, hookBackend(tr, "tcp-counters"))
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	ino := uint32(st.Ino)
	// Noted already if a socket here was adopted at start-up.
	if err := tr.objs.NetnsNew.Delete(ino); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatal(err)
	}
	l := testenv.ServeLoopbackTCP(t, func(net.Conn) {})
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var one uint8
	err = tr.objs.NetnsNew.Lookup(ino, &one)
	if iterates && err != nil {
		t.Errorf("a new connection did not note its namespace %d for conns_refresh_netns: %v", ino, err)
	}
	if !iterates && !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("a new connection noted its namespace %d, which nothing reads where tcp-counters is %q (lookup: %v)",
			ino, hookBackend(tr, "tcp-counters"), err)
	}
}
