// SPDX-License-Identifier: Apache-2.0

// Package privilege decides, before any BPF object is created, whether the
// process holds the capabilities the chosen hooks need, and names those it
// lacks. Root is not enough on its own: a container's root may have dropped
// them, and then the kernel would refuse halfway through start-up.
package privilege

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/stacktop/stacktop/internal/clierr"
)

// Cap is a capability bit number from linux/capability.h.
type Cap uint

// The capabilities stacktop's hooks need.
const (
	NetAdmin Cap = 12 // netfilter links, cgroup_skb programs
	SysAdmin Cap = 21 // entering other network namespaces; stands in for BPF and PERFMON before 5.8
	Perfmon  Cap = 38 // tracing programs (tp_btf, raw_tp, fentry)
	BPF      Cap = 39 // creating maps and loading programs
)

var capNames = map[Cap]string{NetAdmin: "CAP_NET_ADMIN", SysAdmin: "CAP_SYS_ADMIN", Perfmon: "CAP_PERFMON", BPF: "CAP_BPF"}

func (c Cap) String() string { return capNames[c] }

// Need is one capability beyond loading tracing programs, and what for.
type Need struct {
	Cap Cap
	Why string // e.g. "to attach cgroup_skb programs"
}

// Check returns a *clierr.PrivilegeError (exit 77) naming every capability
// the process lacks: always CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, which
// implies both), and each of needs.
func Check(needs ...Need) error {
	eff, err := effective()
	if err != nil {
		return fmt.Errorf("reading our capabilities: %w", err)
	}
	return missing(eff, needs)
}

func missing(eff uint64, needs []Need) error {
	has := func(c Cap) bool { return eff&(1<<c) != 0 }
	var lack []string
	if !has(SysAdmin) && !(has(BPF) && has(Perfmon)) {
		var want []string
		for _, c := range []Cap{BPF, Perfmon} {
			if !has(c) {
				want = append(want, c.String())
			}
		}
		lack = append(lack, strings.Join(want, " and ")+" (to load BPF programs; CAP_SYS_ADMIN also does)")
	}
	for _, n := range needs {
		if !has(n.Cap) {
			lack = append(lack, fmt.Sprintf("%s (%s)", n.Cap, n.Why))
		}
	}
	if len(lack) > 0 {
		return &clierr.PrivilegeError{Missing: lack, Root: os.Geteuid() == 0}
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
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/self/status has no CapEff line")
}
