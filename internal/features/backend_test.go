// SPDX-License-Identifier: Apache-2.0

package features

import (
	"errors"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/clierr"
)

func attachOK() error { return nil }

func attachFail(msg string) func() error { return func() error { return errors.New(msg) } }

func TestChoosePrefersFirstThatAttaches(t *testing.T) {
	var tried []Backend
	cand := func(b Backend, attach func() error) Candidate {
		return Candidate{Backend: b, Attach: func() error { tried = append(tried, b); return attach() }}
	}
	c, err := Choose("tcp-start", Auto,
		cand(FentryBE, attachFail("EPERM")),
		cand(Tracepoint, attachOK),
		cand(Tracepoint, func() error { t.Fatal("tried after success"); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend != Tracepoint || len(c.Refused) != 1 || c.Refused[0].Backend != FentryBE ||
		!strings.Contains(c.Refused[0].Reason, "EPERM") {
		t.Fatalf("choice %+v", c)
	}
	if len(tried) != 2 {
		t.Fatalf("tried %v", tried)
	}
}

func TestChooseForcedBackend(t *testing.T) {
	c, err := Choose("ip-start", Tracepoint,
		Candidate{FentryBE, func() error { t.Fatal("fentry tried although tracepoint was forced"); return nil }},
		Candidate{Tracepoint, attachOK})
	if err != nil || c.Backend != Tracepoint {
		t.Fatalf("choice %+v, err %v", c, err)
	}

	refusal := errors.New("load: EPERM")
	_, err = Choose("ip-start", FentryBE, Candidate{FentryBE, func() error { return refusal }})
	if !errors.Is(err, ErrNoBackend) || !errors.Is(err, refusal) || !strings.Contains(err.Error(), "fentry: load: EPERM") {
		t.Fatalf("forced failing backend: %v", err)
	}
	_, err = Choose("udp-socket-read", FentryBE, Candidate{Tracepoint, attachOK})
	if !errors.Is(err, ErrNoBackend) || !strings.Contains(err.Error(), "does not implement") {
		t.Fatalf("forced missing backend: %v", err)
	}
}

func TestParseBackend(t *testing.T) {
	for _, s := range []string{"auto", "fentry", "tracepoint"} {
		if b, err := ParseBackend(s); err != nil || string(b) != s {
			t.Errorf("ParseBackend(%q) = %q, %v", s, b, err)
		}
	}
	_, err := ParseBackend("kprobe")
	if clierr.Code(err) != clierr.ExitUsage || !strings.Contains(err.Error(), `--backend "kprobe"`) {
		t.Fatalf("ParseBackend(kprobe): %v", err)
	}
}
