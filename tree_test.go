// SPDX-License-Identifier: Apache-2.0

package stacktop

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"testing"
)

// trackedFiles returns the repository's tracked files and their contents.
func trackedFiles(t *testing.T) map[string][]byte {
	t.Helper()
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git ls-files: %v", err)
		}
		t.Skipf("not a git checkout (git ls-files: %v)", err)
	}
	files := map[string][]byte{}
	for _, name := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	return files
}

// workHistory matches what speaks of how the product was made rather than
// of the product: work sessions, tracker issues, who did what, workspace
// paths. History belongs to git and CHANGELOG.md. The patterns stay clear
// of ordinary words: "BPF helper", "helper process", "tmux session" and
// "an issue" pass.
var workHistory = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bsessions?[ -]\d`),
	regexp.MustCompile(`(?i)\b(this|that|one|last|next|earlier|later) sessions?\b`),
	regexp.MustCompile(`(?i)\bsessions'`),
	regexp.MustCompile(`(?i)\bissues? #?\d`),
	regexp.MustCompile(`(?i)\bissue #`),
	regexp.MustCompile(`(?i)\b(the|an|this) issue's\b`),
	regexp.MustCompile(`(?i)\bthe issue (asks|allows|says)\b`),
	regexp.MustCompile(`(?i)\bissues' (targets|budgets)\b`),
	regexp.MustCompile(`(?i)\bthe lead\b`),
	regexp.MustCompile(`(?i)\bhelpers?'s? (branch|worktree|report|notes)\b`),
	regexp.MustCompile(`/work/`),
}

// notProse are tracked files whose text is data, not the product's words:
// licence texts, checksums, captured kernel consoles, and this file's
// examples of what the patterns catch.
func notProse(name string) bool {
	return strings.HasPrefix(name, "LICENSE") || name == "go.sum" || strings.Contains(name, "/testdata/") || name == "tree_test.go"
}

// TestNoWorkHistory keeps the docs, code, comments and test names speaking
// of the product only.
func TestNoWorkHistory(t *testing.T) {
	var any []string
	for _, re := range workHistory {
		any = append(any, "(?:"+re.String()+")")
	}
	anyOf := regexp.MustCompile(strings.Join(any, "|"))
	for name, b := range trackedFiles(t) {
		if notProse(name) || bytes.IndexByte(b, 0) >= 0 || !anyOf.Match(b) { // binary: BPF objects
			continue
		}
		for i, line := range bytes.Split(b, []byte("\n")) {
			for _, re := range workHistory {
				if m := re.Find(line); m != nil {
					t.Errorf("%s:%d: %q speaks of how the product was made (%s): %s", name, i+1, m, re, bytes.TrimSpace(line))
				}
			}
		}
	}
}

// Licences by SPDX identifier: the BPF C is dual-licensed, as the kernel's
// GPL-only helpers need and other projects may reuse it; the rest is
// Apache-2.0.
const (
	bpfLicence  = "(GPL-2.0-only OR BSD-2-Clause)"
	restLicence = "Apache-2.0"
)

// licensed reports the SPDX identifier a tracked file must carry, or "" if
// it is not source (docs, data, generated objects, testdata).
func licensed(name string) string {
	switch ext := path.Ext(name); {
	case strings.Contains(name, "/testdata/"):
		return ""
	case ext == ".c" || ext == ".h":
		return bpfLicence
	case ext == ".go" || ext == ".sh" || ext == ".bt" || ext == ".lua" || ext == ".yaml" || ext == ".yml" || ext == ".service":
		return restLicence
	case name == "Makefile" || name == ".ci/run" || path.Base(name) == "Containerfile":
		return restLicence
	}
	return ""
}

// TestSPDX checks every source file's licence line (in its first three
// lines, after a #! line or before a //go:build one) and that each BPF
// program declares a licence the kernel takes as GPL-compatible, so the
// GPL-only helpers load.
func TestSPDX(t *testing.T) {
	files := trackedFiles(t)
	checked := 0
	for name, b := range files {
		want := licensed(name)
		if want == "" {
			continue
		}
		checked++
		head := bytes.SplitN(b, []byte("\n"), 4)
		if !bytes.Contains(bytes.Join(head[:min(3, len(head))], []byte("\n")), []byte("SPDX-License-Identifier: "+want)) {
			t.Errorf("%s: no %q in its first lines", name, "SPDX-License-Identifier: "+want)
		}
		if strings.HasSuffix(name, ".bpf.c") && !bytes.Contains(b, []byte(`char LICENSE[] SEC("license") = "Dual BSD/GPL";`)) {
			t.Errorf(`%s: its license section is not "Dual BSD/GPL"`, name)
		}
	}
	if checked < 200 {
		t.Errorf("checked only %d source files", checked)
	}
	for _, f := range []string{"LICENSE", "LICENSES/GPL-2.0-only.txt", "LICENSES/BSD-2-Clause.txt"} {
		if _, ok := files[f]; !ok {
			t.Errorf("%s is not in the tree", f)
		}
	}
}

// The patterns must catch what they are for and pass ordinary prose.
func TestWorkHistoryPatterns(t *testing.T) {
	matches := func(s string) bool {
		for _, re := range workHistory {
			if re.MatchString(s) {
				return true
			}
		}
		return false
	}
	// One short shape per pattern: the vocabulary, not sentences.
	for _, s := range []string{"session 8", "sessions 15", "session-8", "issue 12", "issue #3", "this session",
		"sessions'", "the issue's", "the lead", "helper's branch", "/work/x"} {
		if !matches(s) {
			t.Errorf("%q passes", s)
		}
	}
	for _, s := range []string{"a BPF helper call", "re-executed as a helper process", "a new tmux session of fixed size",
		"an issue with the clock", "Possible timer handling issue on cpu=0", "leading zeros", fmt.Sprint("issued ", 3)} {
		if matches(s) {
			t.Errorf("%q is flagged", s)
		}
	}
}
