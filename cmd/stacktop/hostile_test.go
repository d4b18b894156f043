// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/csv"
	"strconv"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/testenv"
)

// TestStreamEscapesHostileProcessNames: a process that names itself
// "ev\nX\x1b[31m" with prctl(PR_SET_NAME) and moves bytes must show up in
// stream text on one line, escaped, with no control character raw.
func TestStreamEscapesHostileProcessNames(t *testing.T) {
	testenv.RequireRoot(t)
	tr := newTraffic(t, "stc-hostile", 61)
	const hostile = "ev\nX\x1b[31m"
	exchange := func(t *testing.T) {
		// The kernel takes the name of the thread that sends.
		if err := testenv.OnNamedThread(hostile, func() error { tr.exchange(t); return nil }); err != nil {
			t.Error(err)
		}
	}
	out := streamRunWith(t, exchange, "stream", "--count", "4", "--interval", "400ms", "--port", strconv.Itoa(tr.port))
	if strings.ContainsAny(out, "\x1b\r") || strings.Contains(out, "\nX") {
		t.Errorf("raw control characters in stream text:\n%q", out)
	}
	if !strings.Contains(out, `/ev\nX\x1b[31m `) {
		t.Errorf("the escaped name is not shown:\n%s", out)
	}
}

// TestStreamNetnsVocabulary: stream takes latency's namespace spellings with
// latency's meaning (they failed with ENOENT): 0 is our namespace, -1 every
// one. The held connection has one end here and one, with the listener, in
// the peer namespace.
func TestStreamNetnsVocabulary(t *testing.T) {
	testenv.RequireRoot(t)
	tr := newTraffic(t, "stc-nsvoc", 63)
	for netns, want := range map[string]int{"0": 1, "/proc/self/ns/net": 1, "-1": 3, tr.peer.Name: 2} {
		out := streamRunWith(t, func(*testing.T) {}, "stream", "--count", "1", "--interval", "200ms",
			"--format", "csv", "--port", strconv.Itoa(tr.port), "--netns", netns)
		// Records, not lines: a comm may hold a newline (quoted in CSV).
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatalf("--netns %s: %v:\n%s", netns, err, out)
		}
		if got := len(rows) - 1; got != want {
			t.Errorf("--netns %s: %d connections, want %d:\n%s", netns, got, want, out)
		}
	}
}
