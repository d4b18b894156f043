// SPDX-License-Identifier: Apache-2.0

// Package connload generates the connection workloads of the user-space
// benchmark on loopback: many idle TCP connections held open, and a steady
// rate of connections opened and closed. It runs in a process of its own so
// its CPU time and file limits stay apart from the tool being measured.
package connload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Listeners returns n server addresses on loopback, all on port, starting
// at the first-th of 127.83.0.1, .2, … Spreading connections over several
// destination addresses keeps each (source, destination) pair well inside
// the ephemeral port range.
func Listeners(first, n int, port uint16) []netip.AddrPort {
	out := make([]netip.AddrPort, n)
	for i := range out {
		k := first + i
		out[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 83, byte(k / 250), byte(k%250 + 1)}), port)
	}
	return out
}

// RaiseFileLimit raises the soft limit on descriptors to the hard one, the
// most a process may hold without CAP_SYS_RESOURCE (which containers and
// some VMs withhold even from root), and returns it.
func RaiseFileLimit() (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("raising RLIMIT_NOFILE to %d: %w", lim.Max, err)
	}
	return lim.Max, nil
}

// ConnsPerProcess is how many connections Hold keeps in one process under
// a descriptor limit: two descriptors each, and some to spare.
func ConnsPerProcess(limit uint64) int { return int((limit - 256) / 2) }

// server accepts on every address and hands accepted connections to keep.
type server struct {
	lns []net.Listener
	wg  sync.WaitGroup
}

func listen(addrs []netip.AddrPort, keep func(net.Conn)) (*server, error) {
	s := &server{}
	for _, a := range addrs {
		ln, err := net.Listen("tcp4", a.String())
		if err != nil {
			s.close()
			return nil, err
		}
		s.lns = append(s.lns, ln)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				keep(c)
			}
		}()
	}
	return s, nil
}

func (s *server) close() {
	for _, ln := range s.lns {
		ln.Close()
	}
	s.wg.Wait()
}

// Hold opens n connections spread over addrs, both ends in this process,
// calls ready once all are established, and keeps them open until ctx ends.
func Hold(ctx context.Context, n int, addrs []netip.AddrPort, ready func()) error {
	limit, err := RaiseFileLimit()
	if err != nil {
		return err
	}
	if n > ConnsPerProcess(limit) {
		return fmt.Errorf("%d connections need %d descriptors, the limit is %d: use more processes", n, 2*n+256, limit)
	}
	var mu sync.Mutex
	var accepted []net.Conn
	allIn := make(chan struct{})
	srv, err := listen(addrs, func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		accepted = append(accepted, c)
		if len(accepted) == n {
			close(allIn)
		}
	})
	if err != nil {
		return err
	}
	defer srv.close()

	dialed := make([]net.Conn, n)
	const workers = 16 // enough to keep the accept queues busy
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				c, err := net.Dial("tcp4", addrs[i%len(addrs)].String())
				if err != nil {
					errs <- fmt.Errorf("connection %d of %d: %w", i+1, n, err)
					return
				}
				dialed[i] = c
			}
		}()
	}
	wg.Wait()
	close(errs)
	defer func() {
		for _, c := range dialed {
			if c != nil {
				c.Close()
			}
		}
		mu.Lock()
		for _, c := range accepted {
			c.Close()
		}
		mu.Unlock()
	}()
	if err := <-errs; err != nil {
		return err
	}
	select {
	case <-allIn:
	case <-ctx.Done():
		return ctx.Err()
	}
	ready()
	<-ctx.Done()
	return nil
}

// ChurnResult counts what Churn did.
type ChurnResult struct {
	Opened  uint64        `json:"opened"`  // connections established and closed again
	Failed  uint64        `json:"failed"`  // dials that failed
	Behind  uint64        `json:"behind"`  // openings skipped because the workers could not keep up
	Elapsed time.Duration `json:"elapsed"` // how long it ran
}

// Churn opens and closes rate connections per second over addrs until ctx
// ends. The client closes first, so TIME_WAIT stays on the client side,
// where loopback's default tcp_tw_reuse=2 recycles the ports.
func Churn(ctx context.Context, rate int, addrs []netip.AddrPort) (ChurnResult, error) {
	if _, err := RaiseFileLimit(); err != nil {
		return ChurnResult{}, err
	}
	srv, err := listen(addrs, func(c net.Conn) {
		go func() {
			// Read until the client's FIN so the server end closes after it.
			_, _ = c.Read(make([]byte, 1))
			c.Close()
		}()
	})
	if err != nil {
		return ChurnResult{}, err
	}
	defer srv.close()

	var res ChurnResult
	var opened, failed, behind atomic.Uint64
	tokens := make(chan int, rate) // at most one second of backlog
	const workers = 64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range tokens {
				c, err := net.Dial("tcp4", addrs[i%len(addrs)].String())
				if err != nil {
					failed.Add(1)
					continue
				}
				c.Close()
				opened.Add(1)
			}
		}()
	}
	// Pace in 10 ms slots: smooth enough for the kernel, coarse enough that
	// the ticker itself costs nothing.
	const slot = 10 * time.Millisecond
	tick := time.NewTicker(slot)
	start := time.Now()
	issued := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-tick.C:
			due := int(now.Sub(start).Seconds() * float64(rate))
			for ; issued < due; issued++ {
				select {
				case tokens <- issued:
				default:
					behind.Add(1)
				}
			}
		}
	}
	tick.Stop()
	close(tokens)
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Opened, res.Failed, res.Behind = opened.Load(), failed.Load(), behind.Load()
	if res.Opened == 0 && res.Failed > 0 {
		return res, errors.New("every connection attempt failed")
	}
	return res, nil
}
