// SPDX-License-Identifier: Apache-2.0

package output

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/clierr"
)

// FuzzOpenLog: whatever an existing --log file holds after our header,
// OpenLog either refuses it with exit 2 and leaves it as it was, or keeps a
// prefix of it made of whole rows and appends whole rows after it.
func FuzzOpenLog(f *testing.F) {
	var row bytes.Buffer
	if err := NewCSV(&row, false).Write(snapshot()); err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", row.String(), row.String()[:50], row.String() + `"ev` + "\n" + `X`, "a,b\n", "\"\n", "\r\n"} {
		f.Add(s)
	}
	header := strings.Join(Header, ",") + "\n"
	f.Fuzz(func(t *testing.T, tail string) {
		path := filepath.Join(t.TempDir(), "log.csv")
		before := header + tail
		if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := OpenLog(path)
		after, _ := os.ReadFile(path)
		if err != nil {
			if clierr.Code(err) != clierr.ExitUsage || string(after) != before {
				t.Fatalf("refused with %v (exit %d), file changed: %v", err, clierr.Code(err), string(after) != before)
			}
			return
		}
		defer l.Close()
		if !strings.HasPrefix(before, string(after)) || len(after) < len(header) {
			t.Fatalf("kept %q, not a prefix of %q", after, before)
		}
		if err := l.Write(snapshot()); err != nil {
			t.Fatal(err)
		}
		final, _ := os.ReadFile(path)
		if !bytes.HasSuffix(final, row.Bytes()) || final[len(final)-len(row.Bytes())-1] != '\n' {
			t.Fatalf("new rows not on lines of their own: %q", final)
		}
		r := csv.NewReader(bytes.NewReader(final[len(after):]))
		r.FieldsPerRecord = len(Header)
		if _, err := r.ReadAll(); err != nil {
			t.Fatalf("appended rows do not parse: %v", err)
		}
	})
}
