// SPDX-License-Identifier: Apache-2.0

package kernelsmd

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/test/kernels/protocol"
)

// doctor61 has a field doctor may grow ("hooks", under any name) and one
// the tables do not use ("extra"), which must not break parsing.
const doctor61 = `{"kernel":"6.1.0-50-cloud-amd64","extra":{"x":1},"tcp_read_clock":{"cached":true,"why":"cached"},
 "probes":[{"name":"fentry","ok":true},{"name":"netfilter_link","ok":false,"reason":"load: invalid argument"}],
 "hooks":[{"hook":"ip-start","backend":"fentry"},
          {"hook":"tcp-start","backend":"fentry","refused":[{"backend":"tracepoint","reason":"load: invalid argument"}]}]}`

const doctorHost = `{"kernel":"6.18.0","tcp_read_clock":{"cached":false,"why":"a clock read per read: stale"},"hooks":{"top/stream":null},"probes":[{"name":"fentry","ok":false,"reason":"load: EPERM"},{"name":"netfilter_link","ok":true},{"name":"iter_tcp","ok":false,"reason":"attach: EPERM"}]}`

func TestWriteTables(t *testing.T) {
	res := &protocol.Result{
		Unsupported: []protocol.Event{{Kind: protocol.Unsupported, Backend: "tracepoint", Reason: "tp_btf: EPERM"}},
		SameAsAuto:  []protocol.Event{{Kind: protocol.SameAsAuto, Backend: "fentry", Reason: "auto chose fentry for all 2 hooks"}},
		Runs: []*protocol.Run{{Suite: "example/pkg", Backend: "fentry", Ended: true, Tests: []protocol.Test{
			{Name: "TestA", Status: protocol.Pass},
			{Name: "TestB", Status: protocol.Skip, Messages: []string{"b_test.go:3: unsupported: no netfilter link"}},
			{Name: "TestC", Status: protocol.Skip, Messages: []string{"c_test.go:5: not in the guest image: tmux (host-only tool)"}},
		}}},
	}
	cols := []Column{
		{Name: "6.1", Suite: "bookworm", Boot: 3.44, Doctor: json.RawMessage(doctor61), Result: res,
			Retried: []string{"stray int3 trap from the kernel's live code patching under TCG: [ 12.5] Oops: int3: 0000 [#1]"}},
		{Name: "host", Doctor: json.RawMessage(doctorHost)},
	}
	var b strings.Builder
	if err := Write(&b, "go run ./test/kernels -write-kernels-md docs/KERNELS.md", cols); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, line := range []string{
		"| 6.1 | bookworm | 6.1.0-50-cloud-amd64 | 3.4 s |",
		"| host | (this machine) | 6.18.0 | — |",
		"| feature | 6.1 | host |",
		"| fentry | ok | refused [1] |",
		"| netfilter_link | refused [2] | ok |",
		"| iter_tcp | not probed | refused [3] |",
		"- [1] load: EPERM",
		"- [2] load: invalid argument",
		"| ip-start | fentry | — |",
		"| tcp-start | fentry (tracepoint refused [1]) | — |",
		"| top/stream (all hooks) | — | unknown [2] |",
		"- [2] doctor reported no hook choices: the command failed before attaching (its suite shows why)",
		"| 6.1 | tracepoint | all | — | — | — | unsupported [1] |",
		"- [1] tp_btf: EPERM",
		"| 6.1 | fentry | all | — | — | — | same as auto [2] |",
		"| 6.1 | fentry | example/pkg | 1 | 0 | TestB [3], TestC [4] | 0 |",
		"- [2] auto chose fentry for all 2 hooks",
		"- [3] unsupported: no netfilter link",
		"- [4] not in the guest image: tmux (host-only tool)",
		"| probe | 6.1 | host |",
		"| tcp-socket-read | the socket's `tcp_clock_cache` | a clock read [1] |",
		"- [1] a clock read per read: stale",
		"## Guest boots that were retried",
		"- 6.1, attempt 1: stray int3 trap from the kernel's live code patching under TCG: [ 12.5] Oops: int3: 0000 [#1]",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("missing line %q in\n%s", line, out)
		}
	}
}

func TestWriteWithoutHookChoices(t *testing.T) {
	var b strings.Builder
	if err := Write(&b, "cmd", []Column{{Name: "host", Doctor: json.RawMessage(`{"kernel":"6.18.0","probes":[]}`)}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "reports no per-hook choices yet") || !strings.Contains(b.String(), "None: every guest ran its plan on its first boot.") {
		t.Errorf("output\n%s", b.String())
	}
}
