// Package privilege decides, before any BPF object is created, whether the
// process may load and attach our programs.
package privilege

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/stacktop/stacktop/internal/clierr"
)

// Capability bit numbers from linux/capability.h.
const (
	capNetAdmin = 12
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// Check returns clierr.ErrPrivileges unless the process runs as root or holds
// CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN stands in for both on old kernels).
// needNetAdmin adds CAP_NET_ADMIN, which netfilter links and TC need.
func Check(needNetAdmin bool) error {
	if os.Geteuid() == 0 {
		return nil
	}
	caps, err := effective()
	if err != nil {
		return clierr.ErrPrivileges
	}
	has := func(bit uint) bool { return caps&(1<<bit) != 0 }
	ok := (has(capBPF) && has(capPerfmon)) || has(capSysAdmin)
	if needNetAdmin && !has(capNetAdmin) {
		ok = false
	}
	if !ok {
		return clierr.ErrPrivileges
	}
	return nil
}

// effective reads the effective capability set from /proc/self/status.
func effective() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, s.Err()
}
