// SPDX-License-Identifier: Apache-2.0

package periodic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestStopWaitsAndEndsCalls(t *testing.T) {
	var calls atomic.Int64
	stop := Start(context.Background(), time.Millisecond, func() { calls.Add(1) })
	for calls.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	stop()
	after := calls.Load()
	time.Sleep(20 * time.Millisecond)
	if n := calls.Load(); n != after {
		t.Errorf("%d calls after stop returned", n-after)
	}
}

func TestContextEndsCalls(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	stop := Start(ctx, time.Millisecond, func() { calls.Add(1) })
	cancel()
	stop() // returns although ctx ended first
	after := calls.Load()
	time.Sleep(20 * time.Millisecond)
	if n := calls.Load(); n != after {
		t.Errorf("%d calls after the context ended", n-after)
	}
}
