// SPDX-License-Identifier: Apache-2.0

package output

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/kube"
)

// TestJSONMatchesEncodingJSON holds the hand-written appender to the bytes
// encoding/json writes for the same records: field names and order, string
// escaping, number and time formats, and a summary line per refresh.
func TestJSONMatchesEncodingJSON(t *testing.T) {
	base := snapshot().Records[0]
	base.TS = time.Date(2026, 11, 30, 8, 18, 7, 506956779, time.UTC)
	var records []conn.Record
	add := func(change func(*conn.Record)) {
		r := base
		change(&r)
		records = append(records, r)
	}
	add(func(*conn.Record) {})
	add(func(r *conn.Record) {
		r.Event, r.Proto, r.Family, r.State = conn.Update, "udp", 4, "UDP"
		r.LocalAddr, r.RemoteAddr = netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("0.0.0.0")
		r.TS = r.TS.In(time.FixedZone("CET", 3600))
	})
	add(func(r *conn.Record) { r.LocalAddr, r.RemoteAddr = netip.Addr{}, netip.IPv6Unspecified() })
	add(func(r *conn.Record) { r.Comm = "a\"b\\c\n\t\r\b\f\x01\x1f<>&\x7f" })
	add(func(r *conn.Record) { r.Comm = "caf\u00e9 \u2028\u2029 \xff\xfe end" })
	add(func(r *conn.Record) { r.Cgroup = "/system.slice/nginx.service" })
	add(func(r *conn.Record) {
		r.Cgroup = "/kubepods.slice/kubepods-pod1.slice/cri-containerd-1.scope"
		r.Names = kube.Names{Namespace: "shop", Pod: "web-7c5f9d8b4-x2x9q", Container: "nginx"}
	})
	add(func(r *conn.Record) {
		r.PID, r.Netns, r.RTTus, r.Retrans = math.MaxUint32, math.MaxUint32, math.MaxUint32, 7
		r.BytesIn, r.BytesOut, r.PacketsIn, r.PacketsOut = math.MaxUint64, 0, 1, math.MaxUint64-1
		r.LocalPort, r.RemotePort = 0, math.MaxUint16
	})
	add(func(r *conn.Record) {
		r.ReadWaitP50us, r.ReadWaitP99us, r.ReadWaitMaxus, r.ReadWaitSamples = 33, 131_072, math.MaxUint64, 25
		r.Cookie, r.ReadWait = 12345, &hist.Wait{} // not in the contract: never printed
	})
	for _, rate := range []float64{0, 1, 0.5, 1234.5678, 1e-7, 1.5e-9, 1e20, 1e21, 3.4e38, 1e300, 5e-324, 123456789012345680} {
		add(func(r *conn.Record) { r.RateIn, r.RateOut = rate, rate/3 })
	}
	snap := conn.Snapshot{Time: base.TS, Records: records, Lost: 12, MapFull: math.MaxUint64}

	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	for i := range records {
		if err := enc.Encode(&records[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Encode(Summary{TS: snap.Time.Format(timeFormat), Event: "summary",
		Connections: len(records), Lost: snap.Lost, MapFull: snap.MapFull}); err != nil {
		t.Fatal(err)
	}

	w := New("json", nil, true).(*JSON)
	for refresh := range 2 { // the second refresh reuses the buffer and the formatted time
		var got bytes.Buffer
		w.w = &got
		if err := w.Write(snap); err != nil {
			t.Fatal(err)
		}
		gotLines, wantLines := strings.Split(got.String(), "\n"), strings.Split(want.String(), "\n")
		if len(gotLines) != len(wantLines) {
			t.Fatalf("refresh %d: %d lines, want %d", refresh, len(gotLines), len(wantLines))
		}
		for i := range wantLines {
			if gotLines[i] != wantLines[i] {
				t.Errorf("refresh %d line %d:\n got %s\nwant %s", refresh, i, gotLines[i], wantLines[i])
			}
		}
	}
}

// TestJSONRefusesNonFiniteRates: like encoding/json, a rate that is not a
// number is an error, not invalid JSON.
func TestJSONRefusesNonFiniteRates(t *testing.T) {
	s := snapshot()
	s.Records[1].RateOut = math.Inf(1)
	if err := New("json", io.Discard, true).Write(s); err == nil {
		t.Error("an infinite rate was written")
	}
}

// BenchmarkJSON writes a refresh of 10,000 connections.
func BenchmarkJSON(b *testing.B) {
	s := snapshot()
	s.Records = make([]conn.Record, 10000)
	for i := range s.Records {
		r := snapshot().Records[0]
		r.LocalPort, r.Cgroup, r.RateIn = uint16(i), "/user.slice", float64(i)*1.5
		s.Records[i] = r
	}
	w := New("json", io.Discard, true)
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Write(s); err != nil {
			b.Fatal(err)
		}
	}
}
