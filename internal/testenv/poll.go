// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"errors"
	"testing"
	"time"
)

// pollEvery is how often Eventually and Until look again: often enough that
// a test waits little past the moment its condition holds, rarely enough
// that the polling itself does not load the 2-core machines tests run on.
const pollEvery = 50 * time.Millisecond

// Eventually calls check until it returns nil, and fails the test, naming
// what it waited for and check's last error, once timeout has passed.
func Eventually(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, timeout, err)
		}
		time.Sleep(pollEvery)
	}
}

// Until is Eventually for a condition that has no error to tell.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errors.New("condition not met")
	})
}
