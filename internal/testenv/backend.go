package testenv

import (
	"os"
	"testing"

	"github.com/stacktop/stacktop/internal/features"
)

// BackendEnv is the environment variable through which the kernel matrix
// (test/kernels) runs every suite once per backend: auto, fentry or
// tracepoint. Unset means auto, which is how the host suites run.
const BackendEnv = "STACKTOP_TEST_BACKEND"

// Backend returns the backend the test must force on the code under test
// (pass it as --backend or to features.Choose). An invalid value fails the
// test: a typo must not quietly test auto instead.
func Backend(t testing.TB) features.Backend {
	t.Helper()
	v := os.Getenv(BackendEnv)
	if v == "" {
		return features.Auto
	}
	b, err := features.ParseBackend(v)
	if err != nil {
		t.Fatalf("%s=%q: must be one of auto, fentry, tracepoint", BackendEnv, v)
	}
	return b
}

// Unsupported skips a test that the kernel cannot run with the forced
// backend, e.g. a hook whose only implementation in that backend the kernel
// refuses, or a feature this kernel version does not have. The reason must
// say what the kernel lacks (the refusal error); the kernel matrix lists every
// such skip, with its reason, as an unsupported feature of that kernel.
func Unsupported(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Skipf(UnsupportedPrefix+format, args...)
}

// UnsupportedPrefix starts the skip message of Unsupported; the matrix
// tells these skips apart from others by it.
const UnsupportedPrefix = "unsupported: "
