// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"testing"

	"github.com/stacktop/stacktop/internal/attach"
)

// TestEveryProgramServesAHook: the hook table names only programs of the
// object, each the same way wherever it appears, and every program of the
// object serves some hook.
func TestEveryProgramServesAHook(t *testing.T) {
	spec, err := loadConns()
	if err != nil {
		t.Fatal(err)
	}
	if err := attach.Check(spec, hooks); err != nil {
		t.Error(err)
	}
}
