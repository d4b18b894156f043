package testenv

import (
	"os"
	"testing"

	"github.com/cilium/ebpf/btf"

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

// ConnTrackerLacks says why this kernel cannot run the connection tracker
// (internal/conntrack) on backend b, or "" when it can, from facts the
// tracker itself does not use: the fexit probe for fentry, and for
// tracepoint the BTF of sock_send_length (6.5+). Tests use it to tell a
// kernel that lacks a backend from a tracker that fails on it.
func ConnTrackerLacks(b features.Backend) string {
	switch b {
	case features.FentryBE:
		if p := features.Detect().Lookup(features.Fexit); !p.OK {
			return "fexit: " + p.Reason
		}
	case features.Tracepoint:
		spec, err := btf.LoadKernelSpec()
		if err != nil {
			return "kernel BTF: " + err.Error()
		}
		if _, err := spec.AnyTypeByName("btf_trace_sock_send_length"); err != nil {
			return "no sock_send_length tracepoint (added in 6.5): " + err.Error()
		}
	}
	return ""
}
