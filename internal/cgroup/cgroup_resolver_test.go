package cgroup

import "testing"

func TestResolverFindsRoot(t *testing.T) {
	r, err := NewResolver()
	if err != nil {
		t.Skip(err)
	}
	root, _ := Root()
	id, err := ID(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Path(id); got != "/" {
		t.Fatalf("Path(%d) = %q, want /", id, got)
	}
}
