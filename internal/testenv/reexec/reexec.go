// SPDX-License-Identifier: Apache-2.0

// Package reexec runs a test binary again as a helper process: the far end
// of a connection with an owner of its own, a process in another cgroup,
// more sockets than one process may hold. It is apart from internal/testenv
// because a package whose tests import testenv is an integration suite the
// kernel matrix runs (test/kernels), and needing a helper does not make one.
package reexec

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// HelperEnv names the helper a re-executed test binary runs instead of its
// tests (Main).
const HelperEnv = "STACKTOP_TEST_HELPER"

// Helpers are the processes a test package runs as this test binary
// re-executed, by name. A helper takes its parameters from its environment
// and its error is its exit status.
type Helpers map[string]func() error

// Main is a test package's TestMain: re-executed as one of helpers
// (HelperEnv set by Command), the binary runs it and exits, 0 or 1 with its
// error on stderr; otherwise it runs the tests.
func Main(m *testing.M, helpers Helpers) {
	name, ok := os.LookupEnv(HelperEnv)
	if !ok {
		os.Exit(m.Run())
	}
	run, ok := helpers[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "helper %q: not one of this test binary's\n", name)
		os.Exit(2)
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Command prepares the helper name of this test binary (see Main); env
// entries ("NAME=value") are its parameters. Its stderr is the test's.
func Command(t testing.TB, name string, env ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return helperCommand(self, name, env)
}

// CommandAs is Command run through a link named comm, so that the helper's
// process name (comm) is comm rather than the test binary's.
func CommandAs(t testing.TB, comm, name string, env ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), comm)
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	return helperCommand(link, name, env)
}

// helperCommand runs no test should Main be missing (-test.run=^$): the
// helper's silence then fails the test that waits for it, rather than
// the whole suite running again in a child.
func helperCommand(path, name string, env []string) *exec.Cmd {
	cmd := exec.Command(path, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), HelperEnv+"="+name), env...)
	cmd.Stderr = os.Stderr
	return cmd
}
