// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceCheckSucceeds(t *testing.T) {
	calls := 0
	Eventually(t, 5*time.Second, "the third call", func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("check called %d times, want 3", calls)
	}
}

// recorder is a testing.TB that records Fatalf instead of stopping the test.
type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	panic(r) // stops Until as Fatalf's runtime.Goexit would
}

func TestUntilFailsNamingWhatAfterTimeout(t *testing.T) {
	r := &recorder{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("Until did not fail the test (recovered %v)", p)
			}
		}()
		Until(r, 200*time.Millisecond, "never", func() bool { return false })
	}()
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("gave up after %v, before the 200ms timeout", waited)
	}
	if want := "never: still failing after 200ms: condition not met"; r.fatal != want {
		t.Errorf("failure %q, want %q", r.fatal, want)
	}
}
