// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestStopsWhenASelectionGoes: latency and serve select by interface index,
// cgroup id and namespace inode in the kernel, so after `-i IFACE` or
// `-c CGROUP` was deleted and re-created under the same name, or the
// namespace of `-n NAME` was gone, they went on counting nothing, silently.
// Both now exit 1 naming what went: latency at its next report, serve
// within one --interval.
func TestStopsWhenASelectionGoes(t *testing.T) {
	testenv.RequireRoot(t)
	const ifname = "stcgone0"
	veth := func() netlink.Link {
		return &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ifname}, PeerName: ifname + "p"}
	}
	root, err := cgroup.Root()
	if err != nil {
		t.Fatal(err)
	}
	cg := filepath.Join(root, "stc-gone")
	// Each case makes its selection, then makes it go while the command
	// runs, and says what the command must name.
	type selection struct {
		value  string
		goAway func() error
		wants  []string
	}
	selections := []struct {
		flag string
		make func(t *testing.T) selection
	}{
		{"-i", func(t *testing.T) selection {
			_ = netlink.LinkDel(veth())
			if err := netlink.LinkAdd(veth()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = netlink.LinkDel(veth()) })
			return selection{ifname, func() error { // re-created: same name, another index
				if err := netlink.LinkDel(veth()); err != nil {
					return err
				}
				return netlink.LinkAdd(veth())
			}, []string{"interface " + ifname + " (index ", "was deleted or re-created since start"}}
		}},
		{"-c", func(t *testing.T) selection {
			_ = os.Remove(cg)
			if err := os.Mkdir(cg, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Remove(cg) })
			return selection{"/stc-gone", func() error { // re-created: same path, another id
				if err := os.Remove(cg); err != nil {
					return err
				}
				return os.Mkdir(cg, 0o755)
			}, []string{"cgroup /stc-gone (id ", "was deleted or re-created since start"}}
		}},
		{"-n", func(t *testing.T) selection {
			p := testenv.NewPeer(t, "stc-gone", 70)
			return selection{p.Name, func() error { p.Destroy(); return nil },
				[]string{"network namespace " + strconv.FormatUint(p.Inode(), 10) + " is gone since start"}}
		}},
	}
	commands := []struct {
		name  string
		start func(t *testing.T, sel []string) (started <-chan struct{}, done <-chan int, stderr *syncBuffer)
	}{
		{"latency", startLatencyReports},
		{"serve", startServeUntilReady},
	}
	for _, c := range commands {
		for _, s := range selections {
			t.Run(c.name+s.flag, func(t *testing.T) {
				sel := s.make(t)
				started, done, stderr := c.start(t, []string{s.flag, sel.value})
				select {
				case <-started:
				case code := <-done:
					testenv.SkipIfRefused(t, stderr.String())
					t.Fatalf("exit %d before it started: %s", code, stderr.String())
				case <-time.After(2 * time.Minute):
					t.Fatalf("not started after 2 minutes: %s", stderr.String())
				}
				if err := sel.goAway(); err != nil {
					t.Fatal(err)
				}
				select {
				case code := <-done:
					ok := code == clierr.ExitFailure
					for _, w := range sel.wants {
						ok = ok && strings.Contains(stderr.String(), w)
					}
					if !ok {
						t.Errorf("exit %d, stderr %q; want 1 naming %q", code, stderr.String(), sel.wants)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("still running 30s after the selection went")
				}
			})
		}
	}
}

// startLatencyReports runs `stacktop latency` with the selection sel;
// started closes at its first report.
func startLatencyReports(t *testing.T, sel []string) (<-chan struct{}, <-chan int, *syncBuffer) {
	out := &firstWrite{started: make(chan struct{})}
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	args := append([]string{"stacktop", "latency", "-e", "tcp-socket-read", "-r", "0.1",
		"--backend", string(testenv.Backend(t))}, sel...)
	go func() { done <- run(context.Background(), args, out, stderr) }()
	return out.started, done, stderr
}

// startServeUntilReady runs `stacktop serve` (latency only) with the
// selection sel; started closes once /-/ready answers 200.
func startServeUntilReady(t *testing.T, sel []string) (<-chan struct{}, <-chan int, *syncBuffer) {
	addr := testenv.FreeLoopbackAddr(t)
	stderr := &syncBuffer{}
	done, started := make(chan int, 1), make(chan struct{})
	args := append([]string{"stacktop", "serve", "--web.listen-address", addr, "--no-collector.connections",
		"-e", "tcp-socket-read", "--interval", "0.1", "--backend", string(testenv.Backend(t))}, sel...)
	go func() { done <- run(context.Background(), args, io.Discard, stderr) }()
	go func() {
		for ctx := t.Context(); ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
			resp, err := http.Get("http://" + addr + "/-/ready")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					close(started)
					return
				}
			}
		}
	}()
	return started, done, stderr
}
