// SPDX-License-Identifier: Apache-2.0

package termsafe

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	cases := map[string]string{
		"nginx":                       "nginx",
		"ev\nX\x1b[31m":               `ev\nX\x1b[31m`,
		"tab\there":                   `tab\there`,
		"del\x7f":                     `del\x7f`,
		"c1\u009b2J":                  `c1\u009b2J`,
		"bidi\u202egnp.exe":           `bidi\u202egnp.exe`,
		"bad\xffutf8":                 `bad\xffutf8`,
		"grüße 日本":                    "grüße 日本",
		`dev-disk-by\x2duuid.service`: `dev-disk-by\x2duuid.service`,
		"":                            "",
	}
	for in, want := range cases {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzString: whatever the input, the output is valid UTF-8 with only
// printable runes, and safe input comes back unchanged.
func FuzzString(f *testing.F) {
	for _, s := range []string{"ev\nX\x1b[31m", "bad\xff", "\u202e", "plain"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := String(s)
		if !utf8.ValidString(out) || strings.IndexFunc(out, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Fatalf("String(%q) = %q keeps unprintable text", s, out)
		}
		if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 && out != s {
			t.Fatalf("String(%q) = %q changed printable text", s, out)
		}
	})
}

// TestValidUTF8: invalid bytes are written as String writes them; valid
// text, control characters included, is kept for the format to escape.
func TestValidUTF8(t *testing.T) {
	cases := map[string]string{
		"nginx":          "nginx",
		"bad\xff\xfe":    `bad\xff\xfe`,
		"ev\nX\x1b[31m":  "ev\nX\x1b[31m",
		"grüße\xc3":      `grüße\xc3`,
		"/pod\xe6\x97.x": `/pod\xe6\x97.x`,
		"":               "",
	}
	for in, want := range cases {
		if got := ValidUTF8(in); got != want || !utf8.ValidString(got) {
			t.Errorf("ValidUTF8(%q) = %q, want %q", in, got, want)
		}
		if String(ValidUTF8(in)) != String(in) {
			t.Errorf("String(ValidUTF8(%q)) = %q differs from String: %q", in, String(ValidUTF8(in)), String(in))
		}
	}
}
