// SPDX-License-Identifier: Apache-2.0

// Package output writes connection snapshots as text, JSON lines or CSV,
// and appends them to a CSV log that survives restarts (--log).
package output

import (
	"fmt"
	"io"
	"strings"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/termsafe"
)

// Writer writes one snapshot (one refresh).
type Writer interface {
	Write(conn.Snapshot) error
}

// Formats lists the accepted --format values, the default first.
var Formats = []string{"text", "json", "csv"}

// New returns the writer for a --format value (validated by the caller).
// summary is the text format's footer line; JSON's summary objects and
// CSV's counter columns are data and always written.
func New(format string, w io.Writer, summary bool) Writer {
	switch format {
	case "json":
		return &JSON{w: w}
	case "csv":
		return NewCSV(w, true)
	default:
		return &Text{w: w, summary: summary}
	}
}

// Text writes one line per connection, then a footer with the counts and
// the loss counters. Without summary the footer is written only when it
// reports a loss: losses are always shown.
type Text struct {
	w       io.Writer
	summary bool
}

func (t *Text) Write(s conn.Snapshot) error {
	var b strings.Builder
	var opened, closed int
	for i := range s.Records {
		r := &s.Records[i]
		switch r.Event {
		case conn.New:
			opened++
		case conn.Closed:
			closed++
		}
		b.WriteString(TextLine(r))
		b.WriteByte('\n')
	}
	if t.summary || s.Lost > 0 || s.MapFull > 0 {
		fmt.Fprintf(&b, "%s -- %d connections (%d new, %d closed); lost events: %d, map full: %d\n",
			s.Time.Format("15:04:05"), len(s.Records), opened, closed, s.Lost, s.MapFull)
	}
	_, err := io.WriteString(t.w, b.String())
	return err
}

// TextLine renders one record the way `stream` prints it.
func TextLine(r *conn.Record) string {
	owner := "-"
	if r.PID != 0 {
		owner = fmt.Sprintf("%d/%s", r.PID, termsafe.String(r.Comm))
	}
	line := fmt.Sprintf("%s %s %s > %s %-11s %-22s in %s (%s) out %s (%s) pkts %d/%d rtt %s retrans %d cgroup %s",
		r.TS.Format("15:04:05"), r.Proto, hostPort(r.LocalAddr.String(), r.LocalPort),
		hostPort(r.RemoteAddr.String(), r.RemotePort), r.State, owner,
		Bytes(r.BytesIn), Rate(r.RateIn), Bytes(r.BytesOut), Rate(r.RateOut),
		r.PacketsIn, r.PacketsOut, rtt(r.RTTus), r.Retrans, orDash(termsafe.String(r.Cgroup)))
	if r.Proto == "udp" {
		line += fmt.Sprintf(" drops %d", r.DropsIn)
	}
	if r.ReadWaitSamples > 0 {
		line += fmt.Sprintf(" wait p50 %s p99 %s max %s (%d reads)", Micros(r.ReadWaitP50us),
			Micros(r.ReadWaitP99us), Micros(r.ReadWaitMaxus), r.ReadWaitSamples)
	}
	if r.RemoteHost != "" {
		line += " host " + termsafe.String(r.RemoteHost)
	}
	if r.Pod != "" {
		line += fmt.Sprintf(" pod %s/%s/%s", termsafe.String(r.Namespace), termsafe.String(r.Pod), orDash(termsafe.String(r.Container)))
	}
	switch r.Event {
	case conn.New:
		line += " [NEW]"
	case conn.Closed:
		line += " [CLOSED]"
	}
	if r.Partial {
		line += " [PARTIAL]"
	}
	return line
}

func hostPort(host string, port uint16) string {
	if strings.Contains(host, ":") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// rtt renders a smoothed RTT; 0 means the kernel has no estimate (UDP, or
// a TCP socket that never exchanged data) and shows as "-", as in the TUI.
func rtt(us uint32) string {
	if us == 0 {
		return "-"
	}
	if us < 1000 {
		return fmt.Sprintf("%dus", us)
	}
	return fmt.Sprintf("%.1fms", float64(us)/1000)
}

// Micros renders a duration in µs the way rtt does: 18us, 1.5ms, 2.3s.
func Micros(us uint64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%dus", us)
	case us < 1000000:
		return fmt.Sprintf("%.1fms", float64(us)/1000)
	}
	return fmt.Sprintf("%.1fs", float64(us)/1e6)
}

// Bytes renders a byte count with binary prefixes: 512B, 1.5KiB, 3.0MiB.
func Bytes(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f%ciB", v, units[i])
}

// Rate renders bytes per second.
func Rate(bps float64) string { return Bytes(uint64(bps+0.5)) + "/s" }
