// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// BinaryEnv names a prebuilt stacktop for Binary to return instead of
// building one; the kernel matrix sets it because its guests have no Go
// toolchain.
const BinaryEnv = "STACKTOP_BIN"

// Binary builds cmd/stacktop once per test process and returns its path, for
// tests that must exercise the real command line (exit codes, signals,
// privileges) in a process of its own.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(BinaryEnv); p != "" {
		return p
	}
	buildOnce.Do(func() {
		_, self, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(self), "..", "..")
		dir, err := os.MkdirTemp("", "stacktop-bin-")
		if err == nil {
			err = os.Chmod(dir, 0o755) // tests also run it as an unprivileged user
		}
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "stacktop")
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/stacktop")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{err: err, out: string(out)}
		}
	})
	if buildErr != nil {
		t.Fatalf("building stacktop: %v", buildErr)
	}
	return buildPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }
