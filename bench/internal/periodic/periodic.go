// SPDX-License-Identifier: Apache-2.0

// Package periodic runs a function at a fixed interval in the background,
// for the load the benchmarks keep up while they measure (scrapes, a trickle
// of datagrams).
package periodic

import (
	"context"
	"time"
)

// Start calls f every interval, from a goroutine of its own, until ctx ends
// or stop is called; stop returns once f will not be called again.
func Start(ctx context.Context, interval time.Duration, f func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { cancel(); <-done }
}
