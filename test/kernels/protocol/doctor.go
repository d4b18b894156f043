// SPDX-License-Identifier: Apache-2.0

package protocol

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Probe is one kernel feature `stacktop doctor` checked.
type Probe struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason"`
}

// Refusal is a backend that could not implement a hook, and why.
type Refusal struct {
	Backend string `json:"backend"`
	Reason  string `json:"reason"`
}

// Choice is the backend `--backend auto` gave a hook; an empty Backend
// means none could attach.
type Choice struct {
	Command string    `json:"-"` // the command whose hook it is, when doctor groups them
	Hook    string    `json:"hook"`
	Backend string    `json:"backend"`
	Refused []Refusal `json:"refused"`
}

// Name identifies the hook across commands, e.g. "latency ip-start".
func (c Choice) Name() string {
	if c.Command == "" {
		return c.Hook
	}
	return c.Command + " " + c.Hook
}

// Doctor is the part of doctor's JSON report the matrix uses. It is read
// loosely: unknown fields are ignored, and any list of {hook, backend,
// refused} objects, at the top level or in an object keyed by command,
// counts as per-hook choices, so doctor can grow without breaking the
// matrix.
type Doctor struct {
	Kernel  string
	Probes  []Probe
	Choices []Choice
	// Unprobed lists commands doctor reported no hook choices for (null:
	// they failed before attaching anything), so the choices are incomplete.
	Unprobed []string
	// ReadClock is where tcp-socket-read takes its time from; nil from a
	// doctor that does not say.
	ReadClock *ReadClock
}

// ReadClock is doctor's tcp_read_clock: the socket's cached clock, or a
// clock read per read and why.
type ReadClock struct {
	Cached bool   `json:"cached"`
	Why    string `json:"why"`
}

// ParseDoctor reads doctor's JSON report.
func ParseDoctor(raw json.RawMessage) (Doctor, error) {
	var d Doctor
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return d, fmt.Errorf("doctor report: %w", err)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := fields[k]
		switch k {
		case "kernel":
			_ = json.Unmarshal(v, &d.Kernel)
		case "probes":
			if err := json.Unmarshal(v, &d.Probes); err != nil {
				return d, fmt.Errorf("doctor probes: %w", err)
			}
		case "tcp_read_clock":
			if err := json.Unmarshal(v, &d.ReadClock); err != nil {
				return d, fmt.Errorf("doctor tcp_read_clock: %w", err)
			}
		default:
			d.Choices = append(d.Choices, choices("", v)...)
			d.addCommands(v)
		}
	}
	return d, nil
}

// addCommands takes v as hook choices grouped by command when it is an
// object whose every value is a list of choices or null (a command that
// failed before it attached anything).
func (d *Doctor) addCommands(v json.RawMessage) {
	var byCommand map[string]json.RawMessage
	if json.Unmarshal(v, &byCommand) != nil {
		return
	}
	cmds := make([]string, 0, len(byCommand))
	for c, list := range byCommand {
		if choices(c, list) == nil && string(list) != "null" {
			return
		}
		cmds = append(cmds, c)
	}
	sort.Strings(cmds)
	for _, c := range cmds {
		list := choices(c, byCommand[c])
		if list == nil {
			d.Unprobed = append(d.Unprobed, c)
		}
		d.Choices = append(d.Choices, list...)
	}
}

// choices returns v as the hook choices of command if it is a list of
// objects that each name a hook, else nothing.
func choices(command string, v json.RawMessage) []Choice {
	var list []Choice
	if json.Unmarshal(v, &list) != nil || len(list) == 0 {
		return nil
	}
	for i := range list {
		if list[i].Hook == "" {
			return nil
		}
		list[i].Command = command
	}
	return list
}

// backendNeeds lists, per forcible backend, the probes without which none
// of its hooks can load. Finer per-hook refusals surface in the suites.
var backendNeeds = map[string][]string{
	"fentry":     {"fentry", "fexit"},
	"tracepoint": {"tp_btf"},
}

// Unsupported says why the kernel cannot run backend at all, or "".
func (d Doctor) Unsupported(backend string) string {
	var reasons []string
	for _, need := range backendNeeds[backend] {
		found := false
		for _, p := range d.Probes {
			if p.Name == need {
				found = true
				if !p.OK {
					reasons = append(reasons, need+": "+p.Reason)
				}
			}
		}
		if !found {
			reasons = append(reasons, need+": not probed by doctor")
		}
	}
	return strings.Join(reasons, "; ")
}

// SameAsAuto reports whether auto chose backend for every hook of every
// command, so that forcing it would repeat the auto run exactly.
func (d Doctor) SameAsAuto(backend string) bool {
	if backend == "auto" || len(d.Choices) == 0 || len(d.Unprobed) > 0 {
		return false
	}
	for _, c := range d.Choices {
		if c.Backend != backend {
			return false
		}
	}
	return true
}
