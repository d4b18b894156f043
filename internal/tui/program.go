// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/resolve"
	"github.com/stacktop/stacktop/internal/runopts"
)

// Options configure Run.
type Options struct {
	Host, Kernel, Backend string // for the summary header
	Sort                  Sort   // initial sort; zero means DefaultSort
	ReadWait              bool   // --read-wait: show the read-wait column
	Resolve               bool   // --resolve: show the Host column
	// Latency, when set (--latency), reads the stack latency histograms
	// every refresh, cumulative since start, for the `L` view.
	Latency func() ([]hist.Series, error)
	// Refresh says how often to take a snapshot and when to stop on its own
	// (--count, --duration); --format is not used.
	Refresh runopts.Options
	// OnSnapshot, when set, sees every snapshot as it is taken, also while
	// the display is paused (the --log writer).
	OnSnapshot func(conn.Snapshot) error

	program []tea.ProgramOption // tests: pipes instead of the terminal
}

// Run shows the table on the terminal until the user quits, --count or
// --duration is reached, or ctx is cancelled. source is called every
// interval from its own goroutine, so a slow snapshot never delays a key
// press, and it keeps being called while the display is paused. After the
// user quits, source (and OnSnapshot) run once more so the data collected
// since the last refresh is not lost, exactly as when a stream ends. Log
// records written meanwhile are held and written when the terminal is back.
func Run(ctx context.Context, source func() (conn.Snapshot, error), opts Options) error {
	defer holdLogs()()
	m := NewModel(Header{Host: opts.Host, Kernel: opts.Kernel, Backend: opts.Backend, Interval: time.Duration(opts.Refresh.Interval), ReadWait: opts.ReadWait, Latency: opts.Latency != nil, Resolve: opts.Resolve}, opts.Sort)
	services, err := resolve.LoadServices()
	if err != nil {
		slog.Warn("ports shown by number only", "reason", err)
	}
	m.services = services
	p := tea.NewProgram(&screen{model: m, theme: ColorTheme()}, append([]tea.ProgramOption{tea.WithContext(ctx)}, opts.program...)...)

	collectCtx, stopCollecting := context.WithCancel(ctx)
	defer stopCollecting()
	collected := make(chan error, 1)
	var intervals latency.Intervals
	go func() {
		err := opts.Refresh.Loop(collectCtx, func(bool) error {
			s, err := source()
			if err != nil {
				return fmt.Errorf("taking a snapshot: %w", err)
			}
			var lat []hist.Series
			if opts.Latency != nil {
				cumulative, err := opts.Latency()
				if err != nil {
					return fmt.Errorf("reading the latency histograms: %w", err)
				}
				lat = intervals.Next(cumulative)
			}
			if opts.OnSnapshot != nil {
				if err := opts.OnSnapshot(s); err != nil {
					return err
				}
			}
			p.Send(snapshotMsg(prepare(s, lat)))
			return nil
		})
		p.Send(stopMsg{})
		collected <- err
	}()

	_, err = p.Run()
	stopCollecting()
	collectErr := <-collected
	if ctx.Err() != nil || errors.Is(err, tea.ErrInterrupted) {
		err = nil // asked to stop: a signal, --duration via ctx, Ctrl-C
	}
	if err != nil {
		return fmt.Errorf("terminal: %w", err)
	}
	return collectErr
}

type (
	snapshotMsg prepared
	stopMsg     struct{} // the collector ended: --count, --duration, or an error
)

// screen adapts Model to Bubble Tea.
type screen struct {
	model *Model
	theme *Theme
}

func (s *screen) Init() tea.Cmd { return nil }

func (s *screen) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		s.model.Resize(msg.Width, msg.Height)
	case tea.KeyPressMsg:
		if s.model.Key(msg.String()) {
			return s, tea.Quit
		}
	case snapshotMsg:
		s.model.take(prepared(msg))
	case stopMsg:
		return s, tea.Quit
	}
	return s, nil
}

func (s *screen) View() tea.View {
	v := tea.NewView(s.model.Render(s.theme))
	v.AltScreen = true
	v.WindowTitle = "stacktop"
	return v
}
