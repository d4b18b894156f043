// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/stacktop/stacktop/bench/internal/connload"
	"github.com/stacktop/stacktop/bench/internal/peer"
)

// The connection load generators run as `bench hold` and `bench churn` in
// processes of their own. They stop when their standard input closes, so
// they never outlive the harness.

// loaderArgs are what both load generators are told: the server addresses
// and how much load (-n connections to hold, -rate per second to churn).
type loaderArgs struct {
	addrs  []netip.AddrPort
	amount int
}

func parseLoaderArgs(name, amountFlag, amountUsage string, args []string) (loaderArgs, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var listeners, first, amount int
	var port uint
	fs.IntVar(&first, "first", 0, "index of the first server address (0: 127.83.0.1)")
	fs.IntVar(&listeners, "listeners", 1, "server addresses")
	fs.UintVar(&port, "port", 0, "server port")
	fs.IntVar(&amount, amountFlag, 1000, amountUsage)
	if err := fs.Parse(args); err != nil {
		return loaderArgs{}, err
	}
	if first < 0 || listeners < 1 || first+listeners > 1000 || port == 0 || port > 65535 {
		return loaderArgs{}, fmt.Errorf("%s: need -first, -listeners within 1000 addresses and -port", name)
	}
	if amount < 1 {
		return loaderArgs{}, fmt.Errorf("%s: -%s %d must be positive", name, amountFlag, amount)
	}
	return loaderArgs{connload.Listeners(first, listeners, uint16(port)), amount}, nil
}

// untilStdinCloses returns a context that ends when stdin reaches EOF.
func untilStdinCloses(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return ctx
}

func holdMain(ctx context.Context, args []string) error {
	a, err := parseLoaderArgs("hold", "n", "connections to hold open", args)
	if err != nil {
		return err
	}
	return connload.Hold(untilStdinCloses(ctx), a.amount, a.addrs, func() { fmt.Println("ready") })
}

func churnMain(ctx context.Context, args []string) error {
	a, err := parseLoaderArgs("churn", "rate", "connections opened and closed per second", args)
	if err != nil {
		return err
	}
	res, err := connload.Churn(untilStdinCloses(ctx), a.amount, a.addrs)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// loader is a running load generator process.
type loader struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string // closed when the process has exited
	waitErr error       // its exit status, valid once lines is closed
}

func startLoader(args ...string) (*loader, error) { return startLoaderIn(nil, args...) }

// startLoaderIn starts a load generator inside ns's network namespace (nil:
// ours).
func startLoaderIn(ns *peer.Peer, args ...string) (*loader, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	if ns != nil {
		cmd = ns.Command(self, args...)
	}
	l := &loader{cmd: cmd, lines: make(chan string, 16)}
	l.cmd.Stderr = os.Stderr
	if l.stdin, err = l.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := l.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := l.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			l.lines <- s.Text()
		}
		if err := l.cmd.Wait(); err != nil {
			l.waitErr = fmt.Errorf("%s: %w", l.cmd.Args[1], err)
		}
		close(l.lines)
	}()
	return l, nil
}

// next waits for the loader's next line of output.
func (l *loader) next(timeout time.Duration) (string, error) {
	select {
	case line, ok := <-l.lines:
		if !ok {
			return "", fmt.Errorf("load generator exited: %v", l.waitErr)
		}
		return line, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("load generator silent for %v", timeout)
	}
}

// stop closes the loader's stdin and returns its last line of output.
func (l *loader) stop() (string, error) {
	l.stdin.Close()
	var last string
	for line := range l.lines {
		last = line
	}
	return last, l.waitErr
}

// holders are load generators that together hold n connections, as many
// processes as the descriptor limit requires, each with its own server
// address so that no (source, destination) pair runs short of ephemeral
// ports (~28,000 each).
type holders []*loader

func startHolders(n int, port uint16) (holders, error) {
	limit, err := connload.RaiseFileLimit()
	if err != nil {
		return nil, err
	}
	per := min(connload.ConnsPerProcess(limit), 20000)
	var hs holders
	for k := 0; n > 0; k++ {
		chunk := min(n, per)
		n -= chunk
		l, err := startLoader("hold", "-n", strconv.Itoa(chunk), "-first", strconv.Itoa(k),
			"-listeners", "1", "-port", strconv.Itoa(int(port)))
		if err != nil {
			hs.stop()
			return nil, err
		}
		hs = append(hs, l)
	}
	for _, l := range hs {
		if line, err := l.next(5 * time.Minute); err != nil || line != "ready" {
			hs.stop()
			return nil, fmt.Errorf("holding connections: %q, %v", line, err)
		}
	}
	return hs, nil
}

func (hs holders) stop() error {
	var errs []error
	for _, l := range hs {
		if _, err := l.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
