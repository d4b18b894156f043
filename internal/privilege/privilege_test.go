// SPDX-License-Identifier: Apache-2.0

package privilege

import (
	"errors"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/clierr"
)

func TestMissingNamesOnlyWhatIsMissing(t *testing.T) {
	netAdmin := Need{Cap: NetAdmin, Why: "for cgroup_skb"}
	cases := []struct {
		eff   uint64
		needs []Need
		want  []string // nil: allowed
	}{
		{1<<BPF | 1<<Perfmon | 1<<NetAdmin, []Need{netAdmin}, nil},
		{1 << SysAdmin, nil, nil},
		{1<<BPF | 1<<Perfmon, nil, nil},
		{1<<BPF | 1<<Perfmon, []Need{netAdmin}, []string{"CAP_NET_ADMIN (for cgroup_skb)"}},
		{1 << BPF, nil, []string{"CAP_PERFMON (to load BPF programs; CAP_SYS_ADMIN also does)"}},
		{0, []Need{netAdmin}, []string{"CAP_BPF and CAP_PERFMON (to load BPF programs; CAP_SYS_ADMIN also does)", "CAP_NET_ADMIN (for cgroup_skb)"}},
	}
	for _, c := range cases {
		err := missing(c.eff, c.needs)
		var pe *clierr.PrivilegeError
		if c.want == nil {
			if err != nil {
				t.Errorf("%#x %v: %v, want allowed", c.eff, c.needs, err)
			}
			continue
		}
		if !errors.As(err, &pe) || strings.Join(pe.Missing, "|") != strings.Join(c.want, "|") || clierr.Code(err) != clierr.ExitPrivileges {
			t.Errorf("%#x %v: %v, want missing %q", c.eff, c.needs, err, c.want)
		}
	}
}
