package cgroup

import "testing"

// TestResolverNamesRoot: the id of the v2 root resolves to "/" (it did not
// while the resolver expected FileInfo.Sys() to be a unix.Stat_t).
func TestResolverNamesRoot(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Skipf("no cgroup v2 hierarchy: %v", err)
	}
	id, err := ID(root)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewResolver()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Path(id); got != "/" {
		t.Fatalf("Path(%d) = %q, want /", id, got)
	}
}
