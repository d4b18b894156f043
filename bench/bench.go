// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/bench/internal/httpload"
	"github.com/stacktop/stacktop/bench/internal/peer"
	"github.com/stacktop/stacktop/bench/internal/tool"
)

// results is everything a run measured; results.json holds it and
// report.md renders it.
type results struct {
	Config    config            `json:"config"`
	Machine   machine           `json:"machine"`
	Command   string            `json:"command"`
	Started   time.Time         `json:"started"`
	Elapsed   time.Duration     `json:"elapsed_ns"`
	Overhead  []overheadResult  `json:"overhead,omitempty"`
	Cost      []costResult      `json:"cost,omitempty"`
	UserSpace []userspaceResult `json:"userspace,omitempty"`
	Churn     []churnResult     `json:"churn,omitempty"`
	Startup   []startupResult   `json:"startup,omitempty"`
	LeftOut   []string          `json:"left_out,omitempty"` // tools this stacktop build lacks
}

type machine struct {
	CPUs    int    `json:"cpus"`
	Model   string `json:"cpu_model"`
	Kernel  string `json:"kernel"`
	MemMiB  uint64 `json:"mem_mib"`
	Version string `json:"stacktop_version"`
}

var errNotRoot = errors.New("the benchmark loads BPF programs and creates network namespaces: run it as root")

func benchMain(ctx context.Context, args []string) error {
	cfg, err := parseConfig(args)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errNotRoot
	}
	res := &results{Config: cfg, Machine: describeMachine(cfg.Stacktop), Started: time.Now(), Command: cfg.Command}
	if res.Command == "" {
		res.Command = strings.Join(append([]string{"bench"}, args...), " ")
	}
	cfg.Tools = slices.DeleteFunc(cfg.Tools, func(name string) bool {
		t, _ := tool.Named(name) // names were validated
		if t.Command == "" || exec.Command(cfg.Stacktop, t.Command, "--help").Run() == nil {
			return false
		}
		slog.Warn("this stacktop has no such command: tool left out", "tool", name)
		res.LeftOut = append(res.LeftOut, name)
		return true
	})
	slog.Info("benchmark starting", "out", cfg.Out, "estimate", cfg.estimate().Round(time.Minute),
		"suites", cfg.Suites, "tools", cfg.Tools)

	self, err := os.Executable()
	if err != nil {
		return err
	}
	env := tool.Env{Stacktop: cfg.Stacktop, Bench: self, Dir: cfg.Out, ServeAddr: cfg.servePort()}
	w, err := startWorkload(cfg)
	if err != nil {
		return err
	}
	defer w.close()

	phases := []struct {
		suite string
		run   func() error
	}{
		{"overhead", func() (err error) { res.Overhead, err = runOverhead(ctx, cfg, env, w); return }},
		{"cost", func() (err error) { res.Cost, err = runCost(ctx, cfg, env, w); return }},
		{"userspace", func() (err error) { res.UserSpace, res.Churn, err = runUserSpace(ctx, cfg, env); return }},
		{"startup", func() (err error) { res.Startup, err = runStartup(ctx, cfg, env); return }},
	}
	for _, p := range phases {
		if !cfg.has(p.suite) {
			continue
		}
		slog.Info("suite", "name", p.suite)
		if err := p.run(); err != nil {
			// Keep what earlier suites measured.
			_ = write(cfg, res)
			return fmt.Errorf("%s: %w", p.suite, err)
		}
		if err := write(cfg, res); err != nil {
			return err
		}
	}
	res.Elapsed = time.Since(res.Started)
	if err := write(cfg, res); err != nil {
		return err
	}
	fmt.Print(renderMarkdown(res))
	slog.Info("benchmark done", "elapsed", res.Elapsed.Round(time.Second), "out", cfg.Out)
	return nil
}

func write(cfg config, res *results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.Out, "results.json"), b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cfg.Out, "report.md"), []byte(renderMarkdown(res)), 0o644)
}

func describeMachine(stacktop string) machine {
	m := machine{CPUs: runtime.NumCPU()}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemMiB = uint64(si.Totalram) * uint64(si.Unit) >> 20
	}
	if stacktop != "" {
		if out, err := exec.Command(stacktop, "version").Output(); err == nil {
			m.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		}
	}
	return m
}

// workload is the HTTP server the overhead and cost suites load, and the
// peer namespace wrk runs in for the veth path.
type workload struct {
	nginx *httpload.Nginx
	peer  *peer.Peer
	cfg   config
}

const (
	peerName   = "stb-bench"
	peerSubnet = 150
)

func startWorkload(cfg config) (*workload, error) {
	w := &workload{cfg: cfg}
	if !cfg.has("overhead") && !cfg.has("cost") {
		return w, nil
	}
	listen := []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), cfg.nginxPort())}
	var err error
	if cfg.has("overhead") && slices.Contains(cfg.Paths, "veth") {
		if w.peer, err = peer.New(peerName, peerSubnet); err != nil {
			return nil, err
		}
		listen = append(listen, netip.AddrPortFrom(w.peer.HostIP4, cfg.nginxPort()))
	}
	cpu := -1
	if cfg.Pin {
		cpu = 0
	}
	if w.nginx, err = httpload.StartNginx(filepath.Join(cfg.Out, "nginx"), listen, cpu); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// wrk returns the load generator for path (loopback or veth) and load
// (keepalive or close), and its URL.
func (w *workload) wrk(path, load string) (httpload.Wrk, string) {
	g := httpload.Wrk{Dir: w.cfg.Out, Threads: 1, CPU: -1, Close: load == workloadClose}
	if w.cfg.Pin {
		g.CPU = 1
	}
	host := "127.0.0.1"
	if path == "veth" {
		g.Prefix = []string{"ip", "netns", "exec", w.peer.Name}
		host = w.peer.HostIP4.String()
	}
	return g, fmt.Sprintf("http://%s:%d/", host, w.cfg.nginxPort())
}

func (w *workload) close() {
	if w.nginx != nil {
		w.nginx.Stop()
	}
	if w.peer != nil {
		w.peer.Close()
	}
}

// renderMain prints the report of an earlier run from its results.json, so
// a change to the report's layout does not need the run repeated.
func renderMain(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: bench render <results.json>")
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	for i := range res.Overhead {
		res.Overhead[i].summarise() // with this version's statistics
	}
	fmt.Print(renderMarkdown(&res))
	return nil
}
