// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"os"
	"strings"
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

// SkipIfRefused skips, as Unsupported, a test whose stacktop command failed
// with output only because the kernel refused the forced backend for one of
// its hooks ("no backend could attach"): e.g. the tracepoint backend on 6.1,
// which has no sock_recv_length tracepoint and no netfilter links. With auto
// such a refusal is a real failure, and the test goes on to report it.
func SkipIfRefused(t testing.TB, output string) {
	t.Helper()
	const refused = "no backend could attach"
	if Backend(t) == features.Auto || !strings.Contains(output, refused) {
		return
	}
	line := output[strings.Index(output, refused):]
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	Unsupported(t, "%s", line)
}

// UnsupportedPrefix starts the skip message of Unsupported; the matrix
// tells these skips apart from others by it.
const UnsupportedPrefix = "unsupported: "
