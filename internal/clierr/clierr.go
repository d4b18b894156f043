// Package clierr carries the exit-code contract of the command line: bad usage
// exits 2, missing privileges 77, anything else 1.
package clierr

import (
	"errors"
	"fmt"
)

// Exit codes shared by every command.
const (
	ExitOK         = 0
	ExitFailure    = 1
	ExitUsage      = 2
	ExitPrivileges = 77
)

// UsageError reports a flag or argument whose value cannot be used.
type UsageError struct {
	Flag   string // flag name without dashes, or an argument's name
	Value  string // the value as the user gave it
	Reason string
}

func (e *UsageError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("invalid --%s: %s", e.Flag, e.Reason)
	}
	return fmt.Sprintf("invalid --%s %q: %s", e.Flag, e.Value, e.Reason)
}

// Usage builds a UsageError; reason may use fmt verbs with args.
func Usage(flag, value, reason string, args ...any) error {
	return &UsageError{Flag: flag, Value: value, Reason: fmt.Sprintf(reason, args...)}
}

// Usagef reports bad usage that is not tied to one flag's value.
func Usagef(format string, args ...any) error {
	return &plainUsage{msg: fmt.Sprintf(format, args...)}
}

type plainUsage struct{ msg string }

func (e *plainUsage) Error() string { return e.msg }

// ErrPrivileges is returned before touching the kernel when the process
// lacks root or the capabilities BPF needs.
var ErrPrivileges = errors.New("stacktop requires root privileges (or CAP_BPF and CAP_PERFMON). Run with sudo.")

// Code maps an error to the process exit code.
func Code(err error) int {
	var ue *UsageError
	var pu *plainUsage
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrPrivileges):
		return ExitPrivileges
	case errors.As(err, &ue), errors.As(err, &pu):
		return ExitUsage
	default:
		return ExitFailure
	}
}
