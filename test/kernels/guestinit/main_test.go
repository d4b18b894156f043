package main

import (
	"encoding/json"
	"testing"
)

func TestUnsupportedBackend(t *testing.T) {
	doctor := json.RawMessage(`{"kernel":"6.18","probes":[
		{"name":"tp_btf","ok":true},
		{"name":"fentry","ok":false,"reason":"load: EPERM"},
		{"name":"fexit","ok":false,"reason":"load: EPERM"}]}`)
	for backend, want := range map[string]string{
		"auto":       "",
		"tracepoint": "",
		"fentry":     "fentry: load: EPERM; fexit: load: EPERM",
	} {
		if got := unsupportedBackend(doctor, backend); got != want {
			t.Errorf("%s: %q, want %q", backend, got, want)
		}
	}
	if got := unsupportedBackend(json.RawMessage(`{"probes":[]}`), "tracepoint"); got != "tp_btf: not probed by doctor" {
		t.Errorf("missing probe: %q", got)
	}
}
