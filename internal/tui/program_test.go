// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/runopts"
	"github.com/stacktop/stacktop/internal/testenv"
)

// terminal stands in for a tty: keys are written to in, frames arrive on out.
type terminal struct {
	in     *io.PipeWriter
	frames chan struct{}
	mu     sync.Mutex
	screen strings.Builder
}

func (t *terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.screen.Write(p)
	t.mu.Unlock()
	select {
	case t.frames <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (t *terminal) output() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.screen.String()
}

func (t *terminal) press(tb testing.TB, keys string) {
	tb.Helper()
	if _, err := io.WriteString(t.in, keys); err != nil {
		tb.Fatal(err)
	}
}

// startRun runs Run on a fake 120×40 terminal and returns its result channel.
func startRun(t testing.TB, source func() (conn.Snapshot, error), opts Options) (*terminal, <-chan error) {
	pr, pw := io.Pipe()
	term := &terminal{in: pw, frames: make(chan struct{}, 1)}
	opts.program = []tea.ProgramOption{tea.WithInput(pr), tea.WithOutput(term), tea.WithWindowSize(120, 40),
		tea.WithEnvironment([]string{"TERM=xterm-256color"}), tea.WithoutSignalHandler()}
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), source, opts) }()
	t.Cleanup(func() { pw.Close() })
	return term, done
}

func refresh(interval time.Duration, count int) runopts.Options {
	return runopts.Options{Interval: interval, Count: count}
}

func TestRunKeepsCollectingWhilePausedAndQuitsOnQ(t *testing.T) {
	var taken, logged atomic.Int32
	source := func() (conn.Snapshot, error) {
		taken.Add(1)
		return fixture(), nil
	}
	hook := func(conn.Snapshot) error { logged.Add(1); return nil }
	term, done := startRun(t, source, Options{Host: "web-01", Refresh: refresh(10*time.Millisecond, 0), OnSnapshot: hook})

	testenv.Until(t, 10*time.Second, "the first snapshot on screen", func() bool { return strings.Contains(term.output(), "systemd-resolved") })
	term.press(t, " ")
	testenv.Until(t, 10*time.Second, "the paused status", func() bool { return strings.Contains(term.output(), "PAUSED") })
	before := logged.Load()
	testenv.Until(t, 10*time.Second, "snapshots while paused", func() bool { return logged.Load() >= before+3 })
	term.press(t, "q")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after q: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("q did not end Run")
	}
	if taken.Load() != logged.Load() {
		t.Fatalf("%d snapshots taken but %d logged: every snapshot must reach the hook", taken.Load(), logged.Load())
	}
	if out := term.output(); !strings.Contains(out, "\x1b[?1049l") {
		t.Fatal("the alternate screen was not left on exit")
	}
}

func TestRunStopsAfterCount(t *testing.T) {
	var taken atomic.Int32
	_, done := startRun(t, func() (conn.Snapshot, error) { taken.Add(1); return fixture(), nil },
		Options{Refresh: refresh(5*time.Millisecond, 3)})
	select {
	case err := <-done:
		if err != nil || taken.Load() != 3 {
			t.Fatalf("--count 3: err %v after %d snapshots", err, taken.Load())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("--count did not end Run")
	}
}

func TestRunReportsCollectorErrors(t *testing.T) {
	broken := errors.New("map lookup failed")
	for name, opts := range map[string]Options{
		"source": {Refresh: refresh(5*time.Millisecond, 0)},
		"hook":   {Refresh: refresh(5*time.Millisecond, 0), OnSnapshot: func(conn.Snapshot) error { return broken }},
	} {
		t.Run(name, func(t *testing.T) {
			source := func() (conn.Snapshot, error) { return fixture(), nil }
			if name == "source" {
				source = func() (conn.Snapshot, error) { return conn.Snapshot{}, broken }
			}
			_, done := startRun(t, source, opts)
			select {
			case err := <-done:
				if !errors.Is(err, broken) {
					t.Fatalf("Run: %v, want the %s error", err, name)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("an error did not end Run")
			}
		})
	}
}

// BenchmarkKeyToScreen10k is the latency a person sees: from a key press
// written to the terminal's input to the redrawn screen written to its
// output, through Bubble Tea's input parsing, event loop and renderer, with
// 10,000 connections on screen. Each press sorts by another column (R and
// t in turn), re-sorting all 10,000 rows, while the collector delivers a
// fresh 10,000-connection snapshot every 250 ms, so some presses wait
// behind a refresh as they would in real use.
func BenchmarkKeyToScreen10k(b *testing.B) {
	snap := bigSnapshot(10_000)
	source := func() (conn.Snapshot, error) {
		s := snap
		s.Records = slices.Clone(snap.Records)
		return s, nil
	}
	term, done := startRun(b, source, Options{Refresh: refresh(250*time.Millisecond, 0)})
	for !strings.Contains(term.output(), "10000 connections") {
		time.Sleep(time.Millisecond)
	}
	var latencies []time.Duration
	keys := []string{"R", "t"}
	for i := 0; b.Loop(); i++ {
		select {
		case <-term.frames:
		default:
		}
		start := time.Now()
		term.press(b, keys[i%2])
		<-term.frames
		latencies = append(latencies, time.Since(start))
	}
	slices.Sort(latencies)
	for _, q := range []struct {
		name string
		at   float64
	}{{"p50", 0.50}, {"p99", 0.99}, {"max", 1}} {
		i := min(int(q.at*float64(len(latencies))), len(latencies)-1)
		b.ReportMetric(float64(latencies[i].Microseconds()), q.name+"-µs")
	}
	term.press(b, "q")
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func TestRunHoldsLogsUntilTheTerminalIsBack(t *testing.T) {
	var logged strings.Builder
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	var warned atomic.Bool
	source := func() (conn.Snapshot, error) {
		if !warned.Swap(true) {
			slog.With("hook", "sock_send_length").Warn("map nearly full", "entries", 65000)
			slog.Debug("below the level: dropped")
		}
		return fixture(), nil
	}
	term, done := startRun(t, source, Options{Refresh: refresh(10*time.Millisecond, 0)})
	testenv.Until(t, 10*time.Second, "a snapshot on screen", func() bool { return strings.Contains(term.output(), "systemd-resolved") })
	if logged.Len() != 0 {
		t.Fatalf("a log line reached stderr while the table was up: %q", logged.String())
	}
	term.press(t, "q")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := logged.String(); strings.Count(got, "\n") != 1 ||
		!strings.Contains(got, `msg="map nearly full" hook=sock_send_length entries=65000`) {
		t.Fatalf("held logs written after exit: %q", got)
	}
}
