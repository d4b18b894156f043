// SPDX-License-Identifier: Apache-2.0

package output

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/conn"
)

// Log is the CSV file --log appends to. It holds whole rows only: each
// refresh is one write, and a write the disk cut short (no space left) is
// truncated away again. A file emptied under it (logrotate's copytruncate)
// gets the header again before the next rows.
type Log struct {
	path string
	f    *os.File
	buf  bytes.Buffer
	csv  *CSV // writes into buf
}

// CheckLog validates a --log path without creating or changing anything:
// the file must be absent, or a regular file that is empty or starts with
// our header. Errors are usage errors.
func CheckLog(path string) error {
	f, err := openExisting(path)
	if f == nil {
		return err
	}
	defer f.Close()
	_, err = checkHeader(path, f)
	return err
}

// OpenLog opens path for appending. A file with another first line, or one
// that is not a regular file, is refused (exit 2): the log never destroys
// or mixes data, and a FIFO would block start-up. A torn last row (a run
// killed or out of space mid-write, by an older version) is cut off with a
// warning saying how many bytes went, so that new rows start on a line of
// their own.
func OpenLog(path string) (*Log, error) {
	if f, err := openExisting(path); f != nil {
		size, err := checkHeader(path, f)
		if err == nil && size > 0 {
			err = repairTornRow(path, f, size)
		}
		f.Close()
		if err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, clierr.Usage("log", path, "cannot open for appending: %v", err)
	}
	l := &Log{path: path, f: f}
	l.csv = NewCSV(&l.buf, false)
	return l, nil
}

// Write appends the snapshot's rows in one write, after the header when the
// file is empty.
func (l *Log) Write(s conn.Snapshot) error {
	st, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("--log %s: %w", l.path, err)
	}
	l.buf.Reset()
	l.csv.needHeader = st.Size() == 0
	if err := l.csv.Write(s); err != nil {
		return err
	}
	n, err := l.f.Write(l.buf.Bytes())
	if err == nil {
		return nil
	}
	if n > 0 {
		if terr := l.f.Truncate(st.Size()); terr != nil {
			return fmt.Errorf("--log %s: %w; removing the partial rows failed too: %v", l.path, err, terr)
		}
	}
	hint := ""
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		hint = "; free space on its file system and run again"
	}
	return fmt.Errorf("--log %s: %w: stopping; the file holds every earlier refresh in whole rows, this one was not logged%s",
		l.path, err, hint)
}

// Close closes the file.
func (l *Log) Close() error { return l.f.Close() }

// openExisting opens an existing --log file for reading, refusing anything
// but a regular file without blocking on it (a FIFO's open would wait for a
// writer). It returns nil, nil when the file does not exist.
func openExisting(path string) (*os.File, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, clierr.Usage("log", path, "cannot read: %v", err)
	}
	if !st.Mode().IsRegular() {
		return nil, clierr.Usage("log", path, "not a regular file (it is a %s)", fileKind(st.Mode()))
	}
	// O_NONBLOCK: should it have become a FIFO since, open returns at once
	// and the check below refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, clierr.Usage("log", path, "cannot read: %v", err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, clierr.Usage("log", path, "not a regular file")
	}
	return f, nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	default:
		return "special file"
	}
}

// checkHeader returns the file's size after checking that it is empty or
// starts with Header.
func checkHeader(path string, f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, clierr.Usage("log", path, "cannot read: %v", err)
	}
	if st.Size() == 0 {
		return 0, nil
	}
	first, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && err != io.EOF {
		return 0, clierr.Usage("log", path, "cannot read: %v", err)
	}
	if want := strings.Join(Header, ","); strings.TrimRight(first, "\r\n") != want {
		return 0, clierr.Usage("log", path, "exists and does not start with the stacktop CSV header; refusing to append")
	}
	return st.Size(), nil
}

// repairTornRow cuts the file after its last complete row when it does not
// end with one. Complete means parsed with every column and ended by a
// newline: a row the write cut inside its last field still has every column.
func repairTornRow(path string, f *os.File, size int64) error {
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, size-1); err != nil {
		return clierr.Usage("log", path, "cannot read: %v", err)
	}
	if last[0] == '\n' {
		return nil
	}
	if size == int64(len(strings.Join(Header, ","))) { // checkHeader read it: the header alone
		return completeHeader(path)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return clierr.Usage("log", path, "cannot read: %v", err)
	}
	keep, ok := completeRows(bufio.NewReader(f), size)
	if !ok {
		return clierr.Usage("log", path, "ends without a newline after a row that is not a stacktop row; refusing to cut or append (repair it by hand)")
	}
	if err := os.Truncate(path, keep); err != nil {
		return clierr.Usage("log", path, "ends in a torn row and cutting it off failed: %v", err)
	}
	slog.Warn("--log file ended in a torn row (a run was killed or out of space mid-write); cut it off",
		"file", path, "bytes_removed", size-keep, "kept_bytes", keep)
	return nil
}

// completeHeader ends a file that holds the header alone, without its
// newline (a run killed as it wrote the header), with the newline: the
// header is whole and stays.
func completeHeader(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.Write([]byte{'\n'})
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return clierr.Usage("log", path, "ends with the header but not its newline, and adding it failed: %v", err)
	}
	return nil
}

// completeRows returns the length of the longest prefix of r (of size
// bytes, not ending with a newline) made of whole rows with Header's column
// count, each ended by a newline, when what follows is one torn row; ok is
// false when a bad row comes before the end, so cutting would lose data.
func completeRows(r io.Reader, size int64) (keep int64, ok bool) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = len(Header)
	cr.ReuseRecord = true
	for {
		_, err := cr.Read()
		off := cr.InputOffset()
		switch {
		case err == nil && off < size:
			keep = off // just past the row's newline
		case err == nil, errors.Is(err, csv.ErrFieldCount) && off == size:
			return keep, true // the last row, torn without or with all its columns
		case errors.Is(err, io.EOF):
			return keep, true
		default:
			return keep, false
		}
	}
}
