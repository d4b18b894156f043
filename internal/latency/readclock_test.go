// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"fmt"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestTCPReadClockCheck: the start-up check finds what mainline's source
// says: tcp_recvmsg refreshes tcp_clock_cache at every copy up to 6.18
// (tcp_rcv_space_adjust), and no longer from 6.19. A distro kernel that
// backported the 6.19 change fails here, rightly: at run time the check
// decides, not the version. TestSocketReadIncludesApplicationDelay checks
// what the clock then records.
func TestTCPReadClockCheck(t *testing.T) {
	testenv.RequireRoot(t)
	var major, minor int
	if _, err := fmt.Sscanf(features.KernelRelease(), "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", features.KernelRelease(), err)
	}
	refreshesAtReads := major < 6 || major == 6 && minor <= 18

	began := time.Now()
	fresh, err := checkTCPReadClock()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("on %d.%d the check took %v", major, minor, time.Since(began))
	if fresh != refreshesAtReads {
		t.Errorf("on %d.%d the check says the cached clock is fresh at reads: %v, want %v", major, minor, fresh, refreshesAtReads)
	}
}
