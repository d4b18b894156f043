// SPDX-License-Identifier: Apache-2.0

package protocol

import (
	"encoding/json"
	"testing"
)

// A doctor report with fields the matrix does not know ("extra") and
// per-hook choices under a name it was never told ("choices"); doctorGrouped
// has them grouped by command, as `stacktop doctor` prints them.
const doctorJSON = `{"kernel":"6.1.0-50-cloud-amd64","extra":{"x":1},
 "probes":[{"name":"tp_btf","ok":true},{"name":"fentry","ok":false,"reason":"load: EPERM"},{"name":"fexit","ok":false,"reason":"load: EPERM"}],
 "choices":[{"hook":"ip-start","backend":"tracepoint"},
          {"hook":"tcp-start","backend":"tracepoint","refused":[{"backend":"fentry","reason":"load: EPERM"}]}]}`

const doctorGrouped = `{"kernel":"5.10.0-32-cloud-amd64","probes":[],"tcp_read_clock":{"cached":true,"why":"refreshed"},
 "hooks":{"top/stream":null,
          "latency":[{"hook":"ip-start","backend":"fentry"},
                     {"hook":"udp-read","backend":"","refused":[{"backend":"fentry","reason":"ENOENT"}]}]}}`

func TestParseDoctorToleratesNewFields(t *testing.T) {
	d, err := ParseDoctor(json.RawMessage(doctorJSON))
	if err != nil {
		t.Fatal(err)
	}
	if d.Kernel != "6.1.0-50-cloud-amd64" || len(d.Probes) != 3 || d.Probes[1].Reason != "load: EPERM" {
		t.Fatalf("doctor %+v", d)
	}
	if len(d.Choices) != 2 || d.Choices[1].Hook != "tcp-start" || d.Choices[1].Refused[0].Backend != "fentry" {
		t.Fatalf("choices %+v", d.Choices)
	}
	g, err := ParseDoctor(json.RawMessage(doctorGrouped))
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Choices) != 2 || g.Choices[0].Name() != "latency ip-start" || g.Choices[1].Backend != "" ||
		g.Choices[1].Refused[0].Reason != "ENOENT" {
		t.Fatalf("grouped choices %+v", g.Choices)
	}
	if len(g.Unprobed) != 1 || g.Unprobed[0] != "top/stream" {
		t.Fatalf("unprobed %q", g.Unprobed)
	}
	if d.ReadClock != nil || g.ReadClock == nil || !g.ReadClock.Cached || g.ReadClock.Why != "refreshed" {
		t.Fatalf("read clock %+v, %+v; want none, then cached", d.ReadClock, g.ReadClock)
	}
	g.Choices[1].Backend = "fentry"
	if g.SameAsAuto("fentry") {
		t.Error("SameAsAuto with a command whose hooks doctor could not probe")
	}
	if _, err := ParseDoctor(json.RawMessage(`not json`)); err == nil {
		t.Error("garbage accepted")
	}
}

func TestBackendSupport(t *testing.T) {
	d, err := ParseDoctor(json.RawMessage(doctorJSON))
	if err != nil {
		t.Fatal(err)
	}
	for backend, want := range map[string]string{
		"auto":       "",
		"tracepoint": "",
		"fentry":     "fentry: load: EPERM; fexit: load: EPERM",
	} {
		if got := d.Unsupported(backend); got != want {
			t.Errorf("Unsupported(%s) = %q, want %q", backend, got, want)
		}
	}
	if got := (Doctor{}).Unsupported("tracepoint"); got != "tp_btf: not probed by doctor" {
		t.Errorf("missing probe: %q", got)
	}
	if !d.SameAsAuto("tracepoint") || d.SameAsAuto("fentry") || d.SameAsAuto("auto") {
		t.Error("SameAsAuto: tracepoint was chosen for every hook, fentry for none")
	}
	d.Choices[0].Backend = "fentry"
	if d.SameAsAuto("tracepoint") || (Doctor{}).SameAsAuto("tracepoint") {
		t.Error("SameAsAuto true for mixed choices or without any")
	}
}
