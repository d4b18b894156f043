// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// HostsFile is the resolver's static table, which name tests add to.
const HostsFile = "/etc/hosts"

// AddHosts appends lines ("address name") to /etc/hosts for the test's
// life and restores the file as it was when the test ends (removes it when
// there was none).
func AddHosts(t testing.TB, lines ...string) {
	t.Helper()
	RequireRoot(t)
	before, err := os.ReadFile(HostsFile)
	existed := err == nil
	switch {
	case os.IsNotExist(err): // the matrix guests have no /etc at all
		if err := os.MkdirAll(filepath.Dir(HostsFile), 0o755); err != nil {
			t.Fatal(err)
		}
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		restore := func() error { return os.WriteFile(HostsFile, before, 0o644) }
		if !existed {
			restore = func() error { return os.Remove(HostsFile) }
		}
		if err := restore(); err != nil {
			t.Errorf("restoring %s: %v", HostsFile, err)
		}
	})
	text := string(before)
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	if err := os.WriteFile(HostsFile, []byte(text+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
