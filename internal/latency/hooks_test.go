// SPDX-License-Identifier: Apache-2.0

package latency

import "testing"

// TestHooksNamed: every value of the C's enum hook has its own name and a
// description, and its name parses back to it.
func TestHooksNamed(t *testing.T) {
	seen := map[string]bool{}
	for _, h := range Hooks {
		name := h.String()
		if table[h].Name == "" || h.Description() == "" || seen[name] {
			t.Errorf("hook %d: name %q (used before: %v), description %q", h, name, seen[name], h.Description())
		}
		seen[name] = true
		if got, err := ParseHook(name); err != nil || got != h {
			t.Errorf("ParseHook(%q) = %v, %v", name, got, err)
		}
	}
}

// TestReasonsNamed: every value of the C's enum reason has its own counter
// name.
func TestReasonsNamed(t *testing.T) {
	seen := map[string]bool{}
	for r, name := range Reasons {
		if name == "" || seen[name] {
			t.Errorf("reason %d: name %q, used before: %v", r, name, seen[name])
		}
		seen[name] = true
	}
}
