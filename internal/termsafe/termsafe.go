// SPDX-License-Identifier: Apache-2.0

// Package termsafe makes text that a local user controls (process names,
// cgroup paths, interface names) safe to print on a terminal: a process may
// name itself "ev\nX\x1b[31m" to split a row or send escape sequences to
// the operator's terminal. Machine formats (JSON, CSV, Prometheus) have
// their own escaping and carry the name unchanged; everything a human
// reads goes through String.
package termsafe

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String returns s with every byte or rune that is not printable (control
// characters, C1 controls, format characters such as bidi overrides,
// invalid UTF-8) replaced by its Go escape: "\n", "\x1b", "\u202e". A
// backslash is kept as it is, so systemd's "\x2d" in unit names reads as
// systemd writes it; the escape is for safety, not for round trips.
func String(s string) string {
	if isSafe(s) {
		return s // the common case allocates nothing
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&0xf, 16))
		case !unicode.IsPrint(r):
			q := strconv.QuoteRune(r) // 'x' with the escape inside
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func isSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return isSafeUnicode(s)
		}
	}
	return true
}

func isSafeUnicode(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return false
			}
		}
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
