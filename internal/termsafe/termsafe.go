// SPDX-License-Identifier: Apache-2.0

// Package termsafe makes text that a local user controls (process names,
// cgroup paths, interface names) safe to print on a terminal: a process may
// name itself "ev\nX\x1b[31m" to split a row or send escape sequences to
// the operator's terminal. Everything a human reads goes through String.
// Machine formats (JSON, CSV, Prometheus) escape control characters
// themselves but need valid UTF-8: names reach them through ValidUTF8, which
// writes an invalid byte as String does, so a name reads the same everywhere.
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
	return escape(s, unicode.IsPrint)
}

// ValidUTF8 returns s with every byte that is not part of valid UTF-8
// replaced by its escape "\xff"; every rune, printable or not, is kept.
// A process may name itself "bad\xff\xfe", and a Prometheus label value,
// a JSON string or a CSV field that carries those bytes is invalid.
func ValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return escape(s, func(rune) bool { return true })
}

// escape writes invalid bytes, and runes keep refuses, as Go escapes.
func escape(s string, keep func(rune) bool) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&0xf, 16))
		case !keep(r):
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
