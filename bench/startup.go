// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"slices"
	"time"

	"github.com/stacktop/stacktop/bench/internal/bpfobj"
	"github.com/stacktop/stacktop/bench/internal/connload"
	"github.com/stacktop/stacktop/bench/internal/periodic"
	"github.com/stacktop/stacktop/bench/internal/rounds"
	"github.com/stacktop/stacktop/bench/internal/tool"
)

type startupResult struct {
	Tool string `json:"tool"`
	// FirstReport: exec until the first byte of output (latency, stream at
	// a 100 ms interval) or the first successful scrape (serve).
	FirstReport rounds.Spread  `json:"first_report_ms"`
	Memlock     bpfobj.Memlock `json:"memlock"`
}

const startupRuns = 3

// startupInterval is short so the first report comes right after start-up
// rather than a full refresh later.
const startupInterval = "100ms"

func runStartup(ctx context.Context, cfg config, env tool.Env) ([]startupResult, error) {
	// One loopback connection, so the stream has something to report.
	ln, err := net.Listen("tcp4", connload.Listeners(0, 1, cfg.holdPort())[0].String())
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// And a datagram every 10 ms: latency prints its first report only once
	// a probe has a sample, so without traffic of its own this would time
	// the host's background traffic rather than start-up.
	stop, err := trickleUDP(ctx, 10*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer stop()

	var out []startupResult
	for _, name := range []string{"latency", "stream", "serve"} {
		if !slices.Contains(cfg.Tools, name) {
			continue
		}
		r := startupResult{Tool: name}
		var ms []float64
		for range startupRuns {
			d, m, err := firstReport(ctx, env, name)
			if err != nil {
				return out, fmt.Errorf("%s: %w", name, err)
			}
			ms = append(ms, float64(d)/float64(time.Millisecond))
			r.Memlock = m
		}
		r.FirstReport = rounds.SpreadOf(ms)
		slog.Info("startup", "tool", name, "first_report_ms", r.FirstReport.Median, "memlock_maps", r.Memlock.Maps)
		out = append(out, r)
	}
	return out, nil
}

// firstReport starts one stacktop command and returns how long it took to
// report, and the memory locked by its BPF objects at that moment.
func firstReport(ctx context.Context, env tool.Env, name string) (time.Duration, bpfobj.Memlock, error) {
	var args []string
	switch name {
	case "serve":
		args = []string{"serve", "--web.listen-address", env.ServeAddr.String()}
	default:
		args = []string{name, "--format", "json", "--interval", startupInterval}
	}
	cmd := exec.CommandContext(ctx, env.Stacktop, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, bpfobj.Memlock{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, bpfobj.Memlock{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	reported := make(chan error, 1)
	if name == "serve" {
		// serve listens before it loads its programs: /-/ready says when
		// they are attached.
		go func() { reported <- tool.PollReady(ctx, "http://"+env.ServeAddr.String()+"/-/ready") }()
	} else {
		go func() {
			_, err := stdout.Read(make([]byte, 1))
			reported <- err
			_, _ = io.Copy(io.Discard, stdout)
		}()
	}
	select {
	case err := <-reported:
		if err != nil {
			return 0, bpfobj.Memlock{}, err
		}
	case <-time.After(60 * time.Second):
		return 0, bpfobj.Memlock{}, fmt.Errorf("no report within 60 s")
	}
	d := time.Since(start)
	held, err := bpfobj.HeldBy(cmd.Process.Pid)
	if err != nil {
		return d, bpfobj.Memlock{}, err
	}
	m, err := bpfobj.MemlockOf(held)
	return d, m, err
}

// trickleUDP sends a datagram every interval to a socket of its own on
// loopback, which reads them, until stop is called.
func trickleUDP(ctx context.Context, interval time.Duration) (stop func(), err error) {
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		rx.Close()
		return nil, err
	}
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := rx.Read(buf); err != nil {
				return
			}
		}
	}()
	stopSending := periodic.Start(ctx, interval, func() { _, _ = tx.Write([]byte("stacktop-bench")) })
	return func() { stopSending(); tx.Close(); rx.Close() }, nil
}
