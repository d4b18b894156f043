// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/connfilter"
	"github.com/stacktop/stacktop/internal/selector"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestFilters sets up known sockets — a TCP connection from a helper
// process in its own cgroup to a server in a peer namespace, and UDP flows
// between them — and checks that each filter, alone and combined, selects
// exactly the expected ones.
func TestFilters(t *testing.T) {
	p := testenv.NewPeer(t, "stc-filt", 56)
	tr := openTracker(t, Config{})

	cgRoot, err := cgroup.Root()
	if err != nil {
		t.Fatal(err)
	}
	cgDir := filepath.Join(cgRoot, "stc-filter-test")
	if err := os.Mkdir(cgDir, 0o755); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(cgDir) })
	cgFD, err := os.Open(cgDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cgFD.Close()

	l := tcpServer(t, p, addrPort(p.PeerIP4, 0), 1, 0)
	tcpPort := uint16(l.Addr().(*net.TCPAddr).Port)
	cmd, _, _ := holdConnection(t, addrPort(p.PeerIP4, int(tcpPort)),
		&syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cgFD.Fd())})
	holder := uint32(cmd.Process.Pid)

	udpPort := udpServer(t, p, 10)
	udpClient := uint32(runHelperProc(t, "udp", "STC_ADDR="+addrPort(p.PeerIP4, int(udpPort)), "STC_SEND=10", "STC_COUNT=2"))

	// Name every record of ours; anything else on the host is ignored.
	type role = string
	roleOf := func(r *conn.Record) role {
		switch {
		case r.Proto == "tcp" && r.LocalPort == tcpPort && r.State == "LISTEN":
			return "listener"
		case r.Proto == "tcp" && r.LocalPort == tcpPort:
			return "tcp-server"
		case r.Proto == "tcp" && r.RemotePort == tcpPort && r.RemoteAddr == p.PeerIP4:
			return "tcp-client"
		case r.Proto == "udp" && r.LocalPort == udpPort && r.LocalAddr == p.PeerIP4:
			return "udp-server:" + strconv.Itoa(int(r.RemotePort))
		case r.Proto == "udp" && r.RemotePort == udpPort && r.RemoteAddr == p.PeerIP4:
			return "udp-client:" + strconv.Itoa(int(r.LocalPort))
		}
		return ""
	}
	all := []role{"listener", "tcp-server", "tcp-client", "udp-server", "udp-server", "udp-client", "udp-client"}
	var snap []conn.Record
	poll(t, tr, func(h *history) bool {
		snap = find(h.last.Records, func(r *conn.Record) bool { return roleOf(r) != "" })
		// The accepted socket gets its owner at its first read.
		return len(snap) == len(all) && !slices.ContainsFunc(snap, func(r conn.Record) bool { return r.PID == 0 })
	})

	cgPath := "/" + filepath.Base(cgDir)
	for _, c := range []struct {
		name string
		opts connfilter.Options
		want []role
	}{
		{"none", connfilter.Options{}, all},
		{"tcp", connfilter.Options{TCP: true}, []role{"listener", "tcp-server", "tcp-client"}},
		{"udp", connfilter.Options{UDP: true}, []role{"udp-server", "udp-server", "udp-client", "udp-client"}},
		{"tcp and udp", connfilter.Options{TCP: true, UDP: true}, all},
		{"port", connfilter.Options{Ports: []string{strconv.Itoa(int(tcpPort))}}, []role{"listener", "tcp-server", "tcp-client"}},
		{"pid", connfilter.Options{Selectors: selector.Specs{PIDs: []string{strconv.Itoa(int(holder))}}}, []role{"tcp-client"}},
		{"pid udp", connfilter.Options{Selectors: selector.Specs{PIDs: []string{strconv.Itoa(int(udpClient))}}}, []role{"udp-client", "udp-client"}},
		{"process", connfilter.Options{Process: "^" + helperComm + "$"}, []role{"tcp-client", "udp-client", "udp-client"}},
		{"process regexp", connfilter.Options{Process: "^stc-h.l"}, []role{"tcp-client", "udp-client", "udp-client"}},
		{"cgroup", connfilter.Options{Selectors: selector.Specs{Cgroups: []string{cgPath}}}, []role{"tcp-client"}},
		{"netns", connfilter.Options{Selectors: selector.Specs{Netns: p.Name}}, []role{"listener", "tcp-server", "udp-server", "udp-server"}},
		{"interface", connfilter.Options{Selectors: selector.Specs{Interfaces: []string{p.HostIf}}}, []role{"tcp-client", "udp-client", "udp-client"}},
		{"combined", connfilter.Options{TCP: true, Selectors: selector.Specs{Netns: p.Name}, Ports: []string{strconv.Itoa(int(tcpPort))}}, []role{"listener", "tcp-server"}},
		{"disjoint", connfilter.Options{Selectors: selector.Specs{PIDs: []string{strconv.Itoa(int(holder))}}, UDP: true}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := c.opts.Compile()
			if err != nil {
				t.Fatal(err)
			}
			var got []role
			for i := range snap {
				if f.Match(&snap[i]) {
					got = append(got, strings.Split(roleOf(&snap[i]), ":")[0])
				}
			}
			slices.Sort(got)
			want := slices.Clone(c.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("selected %v, want %v", got, want)
			}
		})
	}

	// The tracker applies its filter to everything it reports.
	f, err := (&connfilter.Options{Ports: []string{strconv.Itoa(int(udpPort))}, UDP: true}).Compile()
	if err != nil {
		t.Fatal(err)
	}
	filtered := openTracker(t, Config{Filter: f})
	s, err := filtered.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Records {
		if r.Proto != "udp" || r.LocalPort != udpPort && r.RemotePort != udpPort {
			t.Errorf("filtered tracker reported %s", fmt.Sprintf("%+v", r))
		}
	}
}
