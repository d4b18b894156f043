// SPDX-License-Identifier: Apache-2.0

package latency

import "testing"

// FuzzParseHook: a probe name (each element of -e and -d) is accepted only
// when it is exactly a hook's name.
func FuzzParseHook(f *testing.F) {
	for _, s := range []string{"ip-start", "tcp-socket-read", "", "IP-START", "ip-start ", "hook(7)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if h, err := ParseHook(name); err == nil && h.String() != name {
			t.Fatalf("ParseHook(%q) = %v", name, h)
		}
	})
}
