// SPDX-License-Identifier: Apache-2.0

package tui

import (
	"context"
	"log/slog"
	"sync"
)

// heldLogs keeps the log records written while the table owns the terminal,
// where they would tear the screen, and hands them to the real handler once
// the terminal is back.
type heldLogs struct {
	next    slog.Handler
	mu      *sync.Mutex
	records *[]heldRecord
}

type heldRecord struct {
	handler slog.Handler // next, with the attributes and groups of the logger used
	record  slog.Record
}

// holdLogs makes the default logger hold its records; the returned function
// restores it and writes what was held.
func holdLogs() (release func()) {
	prev := slog.Default()
	h := &heldLogs{next: prev.Handler(), mu: &sync.Mutex{}, records: &[]heldRecord{}}
	slog.SetDefault(slog.New(h))
	return func() {
		slog.SetDefault(prev)
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, r := range *h.records {
			_ = r.handler.Handle(context.Background(), r.record)
		}
		*h.records = nil
	}
}

func (h *heldLogs) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *heldLogs) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.records = append(*h.records, heldRecord{h.next, r.Clone()})
	return nil
}

func (h *heldLogs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &heldLogs{next: h.next.WithAttrs(attrs), mu: h.mu, records: h.records}
}

func (h *heldLogs) WithGroup(name string) slog.Handler {
	return &heldLogs{next: h.next.WithGroup(name), mu: h.mu, records: h.records}
}
