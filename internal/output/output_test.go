// SPDX-License-Identifier: Apache-2.0

package output

import (
	"bytes"
	"encoding/csv"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/conn"
)

func TestBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0B", 1023: "1023B", 1024: "1.0KiB", 1536: "1.5KiB", 1 << 20: "1.0MiB", 3 << 30: "3.0GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func snapshot() conn.Snapshot {
	ts := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	r := conn.Record{TS: ts, Event: conn.Closed, Proto: "tcp", Family: 6, LocalAddr: netip.MustParseAddr("fd00::1"),
		LocalPort: 40000, RemoteAddr: netip.MustParseAddr("fd00::2"), RemotePort: 443, PID: 42, Comm: "curl",
		State: "CLOSE", BytesIn: 1 << 20, BytesOut: 100, Partial: true}
	return conn.Snapshot{Time: ts, Records: []conn.Record{r, r}, Lost: 3, MapFull: 1}
}

func TestTextMarksEventsAndLosses(t *testing.T) {
	var b bytes.Buffer
	if err := New("text", &b, true).Write(snapshot()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[fd00::1]:40000 > [fd00::2]:443", "42/curl", "in 1.0MiB", "[CLOSED] [PARTIAL]",
		"2 connections (0 new, 2 closed); lost events: 3, map full: 1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

// Without the summary (top -S) the footer is left out, unless it reports
// a loss.
func TestTextWithoutSummaryStillShowsLosses(t *testing.T) {
	for _, c := range []struct {
		lost, mapFull uint64
		footer        bool
	}{{0, 0, false}, {3, 0, true}, {0, 1, true}} {
		s := snapshot()
		s.Lost, s.MapFull = c.lost, c.mapFull
		var b bytes.Buffer
		if err := New("text", &b, false).Write(s); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if want := len(s.Records) + map[bool]int{true: 1}[c.footer]; len(lines) != want || strings.Contains(b.String(), " -- ") != c.footer {
			t.Errorf("lost %d, map full %d: %d lines, want %d:\n%s", c.lost, c.mapFull, len(lines), want, b.String())
		}
	}
}

// UDP has no RTT: stream text shows "-", as the TUI does, not "0us".
func TestTextRTT(t *testing.T) {
	for rttUS, want := range map[uint32]string{0: " rtt - ", 212: " rtt 212us ", 12_400: " rtt 12.4ms "} {
		r := snapshot().Records[0]
		r.RTTus = rttUS
		if line := TextLine(&r); !strings.Contains(line, want) {
			t.Errorf("rtt %d: %q lacks %q", rttUS, line, want)
		}
	}
}

// Read wait is on the line only when the socket had reads this refresh
// (--read-wait): p50, p99 and max in the RTT's units, and the read count.
func TestTextReadWait(t *testing.T) {
	r := snapshot().Records[0]
	if line := TextLine(&r); strings.Contains(line, "wait") {
		t.Errorf("no reads, yet %q", line)
	}
	r.ReadWaitP50us, r.ReadWaitP99us, r.ReadWaitMaxus, r.ReadWaitSamples = 33, 131_072, 2_770_968, 25
	if line, want := TextLine(&r), " wait p50 33us p99 131.1ms max 2.8s (25 reads) "; !strings.Contains(line, want) {
		t.Errorf("%q lacks %q", line, want)
	}
}

func TestCSVRowsShareTheRefreshTime(t *testing.T) {
	var b bytes.Buffer
	if err := New("csv", &b, true).Write(snapshot()); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil || len(rows) != 3 {
		t.Fatalf("rows %v, err %v", rows, err)
	}
	if rows[1][0] != "2026-11-30T08:00:00.000Z" || rows[2][0] != rows[1][0] {
		t.Errorf("timestamps %q, %q", rows[1][0], rows[2][0])
	}
	if got := rows[1][len(Header)-2:]; got[0] != "3" || got[1] != "1" {
		t.Errorf("loss columns %v, want 3 1", got)
	}
}

func TestLogRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "foreign.csv")
	if err := os.WriteFile(foreign, []byte("a,b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLog(foreign); clierr.Code(err) != clierr.ExitUsage {
		t.Errorf("OpenLog(foreign) = %v, want a usage error", err)
	}
	if err := CheckLog(dir); clierr.Code(err) != clierr.ExitUsage {
		t.Errorf("CheckLog(directory) = %v, want a usage error", err)
	}
	path := filepath.Join(dir, "log.csv")
	for range 2 {
		l, err := OpenLog(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Write(snapshot()); err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	b, _ := os.ReadFile(path)
	if n := strings.Count(string(b), "ts,event,"); n != 1 {
		t.Errorf("%d header rows after two runs:\n%s", n, b)
	}
	if err := CheckLog(filepath.Join(dir, "new.csv")); err != nil {
		t.Errorf("CheckLog(new file) = %v", err)
	}
}
