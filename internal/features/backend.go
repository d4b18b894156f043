// SPDX-License-Identifier: Apache-2.0

package features

import (
	"errors"
	"fmt"
	"strings"

	"github.com/stacktop/stacktop/internal/clierr"
)

// Backend is a family of attachment points that implement our hooks.
type Backend string

// The backends. Auto means: per hook, the first backend that loads and attaches.
const (
	Auto       Backend = "auto"
	FentryBE   Backend = "fentry"
	Tracepoint Backend = "tracepoint"
)

// ParseBackend validates the --backend flag.
func ParseBackend(s string) (Backend, error) {
	switch b := Backend(s); b {
	case Auto, FentryBE, Tracepoint:
		return b, nil
	}
	return "", clierr.Usage("backend", s, "must be one of auto, fentry, tracepoint")
}

// Candidate is one way to implement a hook. Attach loads and attaches it and
// must leave nothing behind when it fails.
type Candidate struct {
	Backend Backend
	Attach  func() error
}

// Attempt records a candidate that was tried and refused.
type Attempt struct {
	Backend Backend `json:"backend"`
	Reason  string  `json:"reason"`
}

// Choice is the outcome of selecting a backend for one hook.
type Choice struct {
	Hook    string    `json:"hook"`
	Backend Backend   `json:"backend"`
	Refused []Attempt `json:"refused,omitempty"`
}

// ErrNoBackend is wrapped by Choose when no candidate could be attached.
var ErrNoBackend = errors.New("no backend could attach")

// Choose attaches the first candidate, in preference order, that succeeds.
// With a forced backend only that backend's candidates are tried.
func Choose(hook string, forced Backend, candidates ...Candidate) (Choice, error) {
	c := Choice{Hook: hook}
	var errs []error
	for _, cand := range candidates {
		if forced != Auto && cand.Backend != forced {
			continue
		}
		err := cand.Attach()
		if err == nil {
			c.Backend = cand.Backend
			return c, nil
		}
		c.Refused = append(c.Refused, Attempt{Backend: cand.Backend, Reason: explain(err)})
		errs = append(errs, err)
	}
	if len(c.Refused) == 0 {
		return c, fmt.Errorf("hook %s: %w: backend %s does not implement it", hook, ErrNoBackend, forced)
	}
	reasons := make([]string, len(c.Refused))
	for i, a := range c.Refused {
		reasons[i] = fmt.Sprintf("%s: %s", a.Backend, a.Reason)
	}
	return c, &noBackendError{msg: fmt.Sprintf("hook %s: %v (%s)", hook, ErrNoBackend, strings.Join(reasons, "; ")),
		refusals: errs}
}

// noBackendError says why no candidate attached and keeps each refusal, so
// a caller can tell a kernel's refusal from a verifier rejecting a program.
type noBackendError struct {
	msg      string
	refusals []error
}

func (e *noBackendError) Error() string { return e.msg }

func (e *noBackendError) Unwrap() []error { return append([]error{ErrNoBackend}, e.refusals...) }
