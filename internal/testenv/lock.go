// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// lockSubnet waits until no other process uses subnet, and holds it until
// the test ends. The same suite may run from several worktrees or CI jobs on
// one host; without this, the second run would delete the first's namespace
// and veth (they share names) and steal its addresses mid-test.
func lockSubnet(t testing.TB, subnet int) {
	t.Helper()
	path := filepath.Join(os.TempDir(), fmt.Sprintf("stacktop-testenv-subnet-%d.lock", subnet))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("locking subnet %d: %v", subnet, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("locking subnet %d: %v", subnet, err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
