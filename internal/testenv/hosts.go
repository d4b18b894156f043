package testenv

import (
	"os"
	"strings"
	"testing"
)

// HostsFile is the resolver's static table, which name tests add to.
const HostsFile = "/etc/hosts"

// AddHosts appends lines ("address name") to /etc/hosts for the test's
// life and restores the file as it was when the test ends.
func AddHosts(t testing.TB, lines ...string) {
	t.Helper()
	RequireRoot(t)
	before, err := os.ReadFile(HostsFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(HostsFile, before, 0o644); err != nil {
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
