// SPDX-License-Identifier: Apache-2.0

package tui

import "strings"

// Addresses are never cut at an arbitrary cell: "10.82.0.…:22005" names no
// host. An IPv4 address, and any port, is shown whole or the column is
// dropped. An IPv6 address gives up whole groups from its middle, keeping
// the leading groups (the network a person recognises) and the last one
// (the host within it): [fd00:5354:…:2]:40112.

// splitAddr takes an endpoint or address as endpoint() and the host view
// render it ("[v6]:port", "v4:port", a bare address) apart into the IPv6
// groups and what surrounds them. v6 is false for anything that is not an
// IPv6 address, which is never abbreviated.
func splitAddr(s string) (groups []string, open, close string, v6 bool) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return nil, "", "", false
		}
		return strings.Split(s[1:end], ":"), "[", s[end:], true
	}
	if strings.Count(s, ":") > 1 {
		return strings.Split(s, ":"), "", "", true
	}
	return nil, "", "", false
}

// abbreviated is s with all but the first head groups and the last one
// elided. head stops before the first "::", which the ellipsis replaces.
func abbreviated(groups []string, open, close string, head int) string {
	return open + strings.Join(groups[:head], ":") + ":…:" + groups[len(groups)-1] + close
}

// leadingGroups is how many groups precede the first "::" (the most that
// can be kept before the ellipsis without keeping part of a "::"), and at
// most all but the last.
func leadingGroups(groups []string) int {
	n := len(groups) - 2
	for i, g := range groups[:max(n, 0)] {
		if g == "" {
			return i
		}
	}
	return n
}

// addrWidth is the least width at which s is still legible: its whole
// length, or for IPv6 its first and last groups around an ellipsis.
func addrWidth(s string) int {
	groups, open, close, v6 := splitAddr(s)
	if !v6 || leadingGroups(groups) < 1 {
		return textWidth(s)
	}
	return min(textWidth(s), textWidth(abbreviated(groups, open, close, 1)))
}

// abbreviateAddr fits an IPv6 address or endpoint into width cells by
// keeping as many leading groups as fit; ok is false when even one does
// not, or s is not IPv6.
func abbreviateAddr(s string, width int) (string, bool) {
	groups, open, close, v6 := splitAddr(s)
	if !v6 {
		return "", false
	}
	for head := leadingGroups(groups); head >= 1; head-- {
		if a := abbreviated(groups, open, close, head); textWidth(a) <= width {
			return a, true
		}
	}
	return "", false
}
