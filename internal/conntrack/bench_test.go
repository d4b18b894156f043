// SPDX-License-Identifier: Apache-2.0

package conntrack

import (
	"net"
	"testing"

	"github.com/stacktop/stacktop/internal/testenv"
)

// BenchmarkSnapshot is one refresh with 4,000 idle loopback connections
// (8,000 tracked sockets) that each moved a byte since the tracker opened:
// the user-space work `stream` does every refresh, without the output.
//
//	sudo go test -run '^$' -bench Snapshot -benchmem ./internal/conntrack
func BenchmarkSnapshot(b *testing.B) {
	testenv.RequireRoot(b)
	tr, err := Open(Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close() })
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	const conns = 4000
	accepted := make(chan net.Conn, conns)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range conns {
		c, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte{1}); err != nil {
			b.Fatal(err)
		}
		s := <-accepted
		b.Cleanup(func() { s.Close() })
	}
	if _, err := tr.Snapshot(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var records int
	for b.Loop() {
		s, err := tr.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		records = len(s.Records)
	}
	b.ReportMetric(float64(records), "records/op")
}
