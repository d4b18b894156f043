// SPDX-License-Identifier: Apache-2.0

package reexec

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	Main(m, Helpers{
		"echo": func() error { _, err := os.Stdout.WriteString(os.Getenv("HELPER_WORD")); return err },
		"fail": func() error { return errors.New("as asked") },
	})
}

// A helper runs instead of the tests with its parameters, under the name
// CommandAs gives it; its error is exit status 1 and its message on stderr,
// and a name the binary does not know is exit status 2.
func TestHelpers(t *testing.T) {
	cmd := CommandAs(t, "stt-echo", "echo", "HELPER_WORD=hello")
	out, err := cmd.Output()
	if err != nil || string(out) != "hello" {
		t.Errorf("echo helper: %q, %v; want \"hello\"", out, err)
	}
	if !strings.HasSuffix(cmd.Path, "/stt-echo") {
		t.Errorf("CommandAs ran %s, want a link named stt-echo", cmd.Path)
	}
	for name, want := range map[string]struct {
		status int
		stderr string
	}{"fail": {1, "helper fail: as asked\n"}, "nonesuch": {2, "helper \"nonesuch\": not one of this test binary's\n"}} {
		cmd := Command(t, name)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != want.status || stderr.String() != want.stderr {
			t.Errorf("helper %s: %v, stderr %q; want exit status %d, %q", name, err, stderr.String(), want.status, want.stderr)
		}
	}
}
