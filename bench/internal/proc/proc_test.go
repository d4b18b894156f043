// SPDX-License-Identifier: Apache-2.0

package proc

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCountsFieldsAfterComm(t *testing.T) {
	// A comm with a space and a ')' must not shift the fields.
	line := "4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 100 1000 200\n"
	got, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; got != want {
		t.Fatalf("CPU time = %v, want %v (utime 250 + stime 75 ticks)", got, want)
	}
}

func TestParseStatRejectsTruncatedLine(t *testing.T) {
	if _, err := parseStat([]byte("1 (x) S 1 2 3")); err == nil {
		t.Fatal("truncated stat line accepted")
	}
}

func TestRSSOfSelf(t *testing.T) {
	rss, err := RSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 {
		t.Fatalf("RSS of the test process = %d bytes, implausibly small", rss)
	}
}

func TestParseStatusKB(t *testing.T) {
	got, err := parseStatusKB([]byte("Name:\tx\nVmRSS:\t   1234 kB\nThreads: 3\n"), "VmRSS:")
	if err != nil || got != 1234*1024 {
		t.Fatalf("got %d, %v; want %d", got, err, 1234*1024)
	}
	if _, err := parseStatusKB([]byte("Name:\tx\n"), "VmRSS:"); err == nil {
		t.Fatal("missing VmRSS accepted")
	}
}
