// SPDX-License-Identifier: Apache-2.0

// Package protocol is the contract between the kernel-matrix runner on the
// host and the init program inside the guest: the plan the host puts into the
// initramfs, and the marker lines the guest writes to its serial console so
// the host can tell results apart from kernel and test chatter.
package protocol

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// PlanPath is where the host puts the plan inside the initramfs.
const PlanPath = "/etc/stacktop-matrix.json"

// Suite is one statically linked test binary.
type Suite struct {
	Package string `json:"package"` // path inside the module, for the report
	Path    string `json:"path"`    // inside the guest
	// Dir is the working directory, like the package directory under go
	// test: it holds a copy of the package's testdata.
	Dir string `json:"dir"`
}

// Plan tells the guest what to run.
type Plan struct {
	Modules  []string `json:"modules"`  // paths of .ko files, in load order
	Stacktop string   `json:"stacktop"` // path of the stacktop binary
	Suites   []Suite  `json:"suites"`
	// Backends to run every suite with; a backend the kernel cannot do is
	// reported as unsupported rather than run.
	Backends     []string `json:"backends"`
	SuiteTimeout string   `json:"suite_timeout"` // go test -test.timeout for one binary
	TestRun      string   `json:"test_run,omitempty"`
	TestCount    int      `json:"test_count,omitempty"` // go test -count; 0 is 1
	// Finished are the runs an earlier boot of this guest completed before
	// the emulator or kernel killed it; a boot again runs only the rest.
	Finished []SuiteRun `json:"finished,omitempty"`
}

// SuiteRun is one suite run with one backend.
type SuiteRun struct {
	Package string `json:"package"`
	Backend string `json:"backend"`
}

// Marker lines start with Prefix followed by one JSON Event.
const Prefix = "@@stacktop-matrix "

// Event kinds, in the order a healthy guest emits them.
const (
	Booted       = "booted"       // init started; Seconds is the guest uptime
	DoctorReport = "doctor"       // Doctor holds `stacktop doctor --format json`
	Unsupported  = "unsupported"  // Backend cannot run on this kernel: Reason
	SameAsAuto   = "same-as-auto" // forcing Backend would repeat the auto run: Reason
	Begin        = "begin"        // Suite starts with Backend
	End          = "end"          // Suite ended with ExitCode after Seconds
	Failure      = "failure"      // the guest could not do what the plan asked: Reason
	Done         = "done"         // all steps ran; the guest powers off next
)

// Event is one marker.
type Event struct {
	Kind     string          `json:"kind"`
	Suite    string          `json:"suite,omitempty"`
	Backend  string          `json:"backend,omitempty"`
	ExitCode int             `json:"exit_code,omitempty"`
	Seconds  float64         `json:"seconds,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Doctor   json.RawMessage `json:"doctor,omitempty"`
}

// Emit writes e as one marker line. The leading newline ends any partial
// line a test left on the console, so the marker always starts a line.
func Emit(w io.Writer, e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "\n%s%s\n", Prefix, b)
	return err
}

// ParseMarker returns the event on a console line, if it is a marker. A
// marker that does not decode is an error: it means the console mangled it.
func ParseMarker(line string) (Event, bool, error) {
	i := strings.Index(line, Prefix)
	if i < 0 {
		return Event{}, false, nil
	}
	var e Event
	if err := json.Unmarshal([]byte(strings.TrimRight(line[i+len(Prefix):], "\r")), &e); err != nil {
		return Event{}, true, fmt.Errorf("malformed marker %q: %w", line, err)
	}
	return e, true, nil
}

// Lines calls fn for every line read from r, without the line ending.
func Lines(r io.Reader, fn func(string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		fn(strings.TrimRight(sc.Text(), "\r"))
	}
	return sc.Err()
}
