// SPDX-License-Identifier: Apache-2.0

package connfilter

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/selector"
)

// FuzzCompile: any --process and --port text compiles or is refused with
// exit 2; a compiled --port selects exactly the connections on that port.
func FuzzCompile(f *testing.F) {
	for _, s := range [][2]string{{"nginx", "80"}, {"^(a|b)+$", "65535"}, {"(", "0"}, {"[[:alpha:]]", "65536"}, {"", "-1"}, {"a{1000}", "1e3"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, process, port string) {
		o := Options{Process: process, Ports: []string{port}}
		flt, err := o.CompileWith(selector.Selection{Netns: selector.Netns{All: true}})
		if err != nil {
			if clierr.Code(err) != clierr.ExitUsage {
				t.Fatalf("(%q, %q): %v, want exit 2", process, port, err)
			}
			return
		}
		n, _ := strconv.ParseUint(port, 10, 16)
		r := conn.Record{Proto: "tcp", LocalAddr: netip.MustParseAddr("127.0.0.1"), LocalPort: uint16(n)}
		other := r
		other.LocalPort = uint16(n) + 1
		if flt.Match(&other) {
			t.Fatalf("--port %q selects port %d", port, other.LocalPort)
		}
	})
}
