// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stacktop/stacktop/internal/testenv"
)

// TestIDAndPathRoundTrip creates a real cgroup and checks that its id (the
// directory's inode, as BPF's bpf_get_current_cgroup_id reports it) maps back
// to its path, including one created after the resolver's first scan.
func TestIDAndPathRoundTrip(t *testing.T) {
	testenv.RequireRoot(t)
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewResolver()
	if err != nil {
		t.Fatal(err)
	}
	rootID, err := ID("/")
	if err != nil || r.Path(rootID) != "/" {
		t.Fatalf("root id %d path %q err %v", rootID, r.Path(rootID), err)
	}
	dir := filepath.Join(root, "stacktop-test-cgroup")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	for _, p := range []string{"/stacktop-test-cgroup", dir} {
		id, err := ID(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Path(id); got != "/stacktop-test-cgroup" {
			t.Fatalf("Path(ID(%q)) = %q", p, got)
		}
	}
	if _, err := ID("/no-such-cgroup-here"); err == nil {
		t.Fatal("ID of a missing cgroup succeeded")
	}
}
