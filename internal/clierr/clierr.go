// SPDX-License-Identifier: Apache-2.0

// Package clierr carries the exit-code contract of the command line: bad usage
// exits 2, missing privileges 77, anything else 1.
package clierr

import (
	"errors"
	"fmt"
	"strings"
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

// PrivilegeError is returned before touching the kernel when the process
// lacks a capability the chosen hooks need. Missing names each capability
// with what it is for, e.g. "CAP_NET_ADMIN (to attach cgroup_skb programs)".
type PrivilegeError struct {
	Missing []string
	Root    bool // we run as root, whose capabilities were dropped (a container)
}

// Prog is the name the binary was invoked as (stacktop, tcptop,
// netstacklat), which messages use; main sets it.
var Prog = "stacktop"

func (e *PrivilegeError) Error() string {
	if e.Root {
		return fmt.Sprintf("%s needs %s, which this process lacks although it runs as root: its capabilities were dropped (a container?); grant them to it (e.g. docker run --cap-add).",
			Prog, strings.Join(e.Missing, " and "))
	}
	return fmt.Sprintf("%s needs %s, which this process lacks. Run it as root (sudo %s, or from a root shell) or grant them with setcap.",
		Prog, strings.Join(e.Missing, " and "), Prog)
}

// Code maps an error to the process exit code.
func Code(err error) int {
	var ue *UsageError
	var pu *plainUsage
	var pe *PrivilegeError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &pe):
		return ExitPrivileges
	case errors.As(err, &ue), errors.As(err, &pu):
		return ExitUsage
	default:
		return ExitFailure
	}
}
