package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestLatencyStopsWhenASelectionGoes: latency filters by interface index
// and cgroup id in the kernel, so after `-i IFACE` or `-c CGROUP` is deleted
// and re-created under the same name it used to count nothing, silently. It
// now exits 1 at the next report naming what went.
func TestLatencyStopsWhenASelectionGoes(t *testing.T) {
	testenv.RequireRoot(t)
	const ifname = "stcgone0"
	veth := func() netlink.Link {
		return &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ifname}, PeerName: ifname + "p"}
	}
	_ = netlink.LinkDel(veth())
	if err := netlink.LinkAdd(veth()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(veth()) })
	root, err := cgroup.Root()
	if err != nil {
		t.Fatal(err)
	}
	cg := filepath.Join(root, "stc-gone")
	_ = os.Remove(cg)
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(cg) })
	recreate := map[string]func() error{
		ifname: func() error {
			if err := netlink.LinkDel(veth()); err != nil {
				return err
			}
			return netlink.LinkAdd(veth())
		},
		"/stc-gone": func() error {
			if err := os.Remove(cg); err != nil {
				return err
			}
			return os.Mkdir(cg, 0o755)
		},
	}
	for _, c := range []struct{ flag, value, want string }{
		{"-i", ifname, "interface " + ifname + " (index "},
		{"-c", "/stc-gone", "cgroup /stc-gone (id "},
	} {
		t.Run(c.flag, func(t *testing.T) {
			out := &firstWrite{started: make(chan struct{})}
			var stderr syncBuffer
			done := make(chan int, 1)
			go func() {
				done <- run(context.Background(), []string{"stacktop", "latency", "-e", "tcp-socket-read", "-r", "0.1",
					"--backend", string(testenv.Backend(t)), c.flag, c.value}, out, &stderr)
			}()
			select {
			case <-out.started:
			case code := <-done:
				testenv.SkipIfRefused(t, stderr.String())
				t.Fatalf("exit %d before the first report: %s", code, stderr.String())
			}
			if err := recreate[c.value](); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-done:
				if code != clierr.ExitFailure || !strings.Contains(stderr.String(), c.want) ||
					!strings.Contains(stderr.String(), "was deleted or re-created since start") {
					t.Errorf("exit %d, stderr %q; want 1 naming %q", code, stderr.String(), c.want)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("still running 30s after the selection was re-created")
			}
		})
	}
}
