// SPDX-License-Identifier: Apache-2.0

package output

import (
	"bytes"
	"encoding/csv"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/testenv"
)

// A FIFO (or any non-regular file) is refused at once with exit 2; it used
// to block start-up in open(2) until a writer came.
func TestLogRefusesFIFOWithoutBlocking(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "log.fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, check := range map[string]func() error{
		"CheckLog": func() error { return CheckLog(fifo) },
		"OpenLog":  func() error { _, err := OpenLog(fifo); return err },
	} {
		done := make(chan error, 1)
		go func() { done <- check() }()
		select {
		case err := <-done:
			if clierr.Code(err) != clierr.ExitUsage || !strings.Contains(err.Error(), "not a regular file (it is a FIFO)") {
				t.Errorf("%s(fifo) = %v, want a usage error naming the FIFO", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s(fifo) blocks", name)
		}
	}
}

// logRows parses a log file and checks it holds whole rows under one header.
func logRows(t *testing.T, path string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = len(Header)
	rows, err := r.ReadAll()
	if err != nil || len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("log is not whole rows (%v):\n%q", err, b)
	}
	if len(rows) == 0 || !slices.Equal(rows[0], Header) {
		t.Fatalf("log does not start with the header:\n%s", b)
	}
	for i, row := range rows[1:] {
		if slices.Equal(row, Header) {
			t.Errorf("a second header at row %d", i+1)
		}
	}
	return rows[1:]
}

// "No space left on device" in mid-write leaves no half row: the refresh
// that did not fit is cut off again and the error says so.
func TestLogKeepsWholeRowsWhenTheDiskIsFull(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16k"); err != nil {
		t.Fatalf("mounting a small tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	path := filepath.Join(dir, "log.csv")
	l, err := OpenLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := snapshot()
	s.Records = slices.Repeat(s.Records, 7) // 14 rows of ~150 bytes: 16 KiB fills mid-refresh
	var written int
	for ; written < 100; written++ {
		if err = l.Write(s); err != nil {
			break
		}
	}
	want := "no space left on device: stopping; the file holds every earlier refresh in whole rows, this one was not logged; free space on its file system and run again"
	if !errors.Is(err, syscall.ENOSPC) || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("after %d refreshes: %v, want ENOSPC saying %q", written, err, want)
	}
	if rows := logRows(t, path); len(rows) != written*len(s.Records) {
		t.Errorf("%d rows, want %d (%d whole refreshes)", len(rows), written*len(s.Records), written)
	}
}

// A torn last row (left by a run killed mid-write) is cut off at start with
// a warning; a file whose bad row is not the last is refused untouched.
func TestLogRepairsATornLastRow(t *testing.T) {
	var b bytes.Buffer
	if err := NewCSV(&b, true).Write(snapshot()); err != nil {
		t.Fatal(err)
	}
	whole := b.String()
	dir := t.TempDir()
	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	for name, torn := range map[string]string{
		"cut in a field":      whole + whole[len(strings.Join(Header, ","))+1:][:40],
		"cut in the last one": strings.TrimSuffix(whole, "\n")[:len(whole)-3],
		"no newline only":     strings.TrimSuffix(whole, "\n"),
	} {
		logged.Reset()
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".csv")
		if err := os.WriteFile(path, []byte(torn), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := CheckLog(path); err != nil {
			t.Errorf("%s: CheckLog = %v", name, err)
		}
		l, err := OpenLog(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := l.Write(snapshot()); err != nil {
			t.Fatal(err)
		}
		l.Close()
		rows := logRows(t, path)
		kept := strings.Count(torn[:strings.LastIndexByte(torn, '\n')+1], "\n") - 1
		if len(rows) != kept+2 {
			t.Errorf("%s: %d rows, want the %d whole ones and the 2 new", name, len(rows), kept)
		}
		if !strings.Contains(logged.String(), "torn row") || !strings.Contains(logged.String(), "bytes_removed=") {
			t.Errorf("%s: no warning saying the torn row was cut: %q", name, logged.String())
		}
	}

	// The header alone, without its newline, is whole: it stays, and gets
	// its newline, with no torn row to warn about.
	header := filepath.Join(dir, "header.csv")
	if err := os.WriteFile(header, []byte(strings.Join(Header, ",")), 0o644); err != nil {
		t.Fatal(err)
	}
	logged.Reset()
	l, err := OpenLog(header)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if b, _ := os.ReadFile(header); string(b) != strings.Join(Header, ",")+"\n" || logged.Len() > 0 {
		t.Errorf("a log of the header without its newline became %q, logging %q", b, logged.String())
	}

	bad := filepath.Join(dir, "bad.csv")
	content := strings.Join(Header, ",") + "\nnot,a,stacktop,row\n" + whole[len(strings.Join(Header, ","))+1:]
	content = strings.TrimSuffix(content, "\n")
	if err := os.WriteFile(bad, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLog(bad); clierr.Code(err) != clierr.ExitUsage || !strings.Contains(err.Error(), "refusing to cut or append") {
		t.Errorf("OpenLog(bad row before the torn one) = %v, want a usage error", err)
	}
	if b, _ := os.ReadFile(bad); string(b) != content {
		t.Errorf("a refused log was modified")
	}
}

// logrotate's copytruncate empties the file under a running stacktop: the
// next refresh starts it with the header again, so the next start accepts it.
func TestLogHeaderAfterCopytruncate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.csv")
	l, err := OpenLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 3 {
		if err := l.Write(snapshot()); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if err := os.Truncate(path, 0); err != nil { // what copytruncate does after copying
				t.Fatal(err)
			}
		}
	}
	if rows := logRows(t, path); len(rows) != 2 {
		t.Errorf("%d rows after the truncation, want the 2 of the last refresh", len(rows))
	}
	if err := CheckLog(path); err != nil {
		t.Errorf("the next start refuses the rotated log: %v", err)
	}
}
