// SPDX-License-Identifier: Apache-2.0

package output

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/stacktop/stacktop/internal/conn"
)

// JSON writes one conn.Record object per line, then one summary object per
// refresh: {"ts":…,"event":"summary","connections":N,"lost":N,"map_full":N}.
//
// Records are appended by hand rather than with encoding/json: a stream
// prints every connection every refresh, and reflection dominated its CPU
// time at 10,000 connections. The bytes are the ones encoding/json writes
// (a test holds them equal), and they reach the output in large writes, not
// one system call per record.
type JSON struct {
	w   io.Writer
	buf []byte
	// The refresh time as last formatted: every record of a refresh shares it.
	ts     time.Time
	tsJSON []byte
}

// Summary is the per-refresh JSON object carrying the loss counters.
type Summary struct {
	TS          string `json:"ts"`
	Event       string `json:"event"` // always "summary"
	Connections int    `json:"connections"`
	Lost        uint64 `json:"lost"`
	MapFull     uint64 `json:"map_full"`
}

// flushAt bounds the buffer: a refresh of 100,000 records is written in
// pieces of this size rather than held whole.
const flushAt = 64 << 10

func (j *JSON) Write(s conn.Snapshot) error {
	b := j.buf[:0]
	var err error
	for i := range s.Records {
		if b, err = j.appendRecord(b, &s.Records[i]); err != nil {
			return err
		}
		if len(b) >= flushAt {
			if _, err := j.w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = append(b, `{"ts":`...)
	b = appendString(b, s.Time.Format(timeFormat))
	b = append(b, `,"event":"summary","connections":`...)
	b = strconv.AppendInt(b, int64(len(s.Records)), 10)
	b = append(b, `,"lost":`...)
	b = strconv.AppendUint(b, s.Lost, 10)
	b = append(b, `,"map_full":`...)
	b = strconv.AppendUint(b, s.MapFull, 10)
	b = append(b, "}\n"...)
	_, err = j.w.Write(b)
	j.buf = b[:0]
	return err
}

// appendRecord appends r as one line, fields in conn.Record's order.
func (j *JSON) appendRecord(b []byte, r *conn.Record) ([]byte, error) {
	if r.TS != j.ts || j.tsJSON == nil {
		ts, err := r.TS.MarshalJSON()
		if err != nil {
			return b, err
		}
		j.ts, j.tsJSON = r.TS, ts
	}
	b = append(b, `{"ts":`...)
	b = append(b, j.tsJSON...)
	b = append(b, `,"event":`...)
	b = appendString(b, string(r.Event))
	b = append(b, `,"proto":`...)
	b = appendString(b, r.Proto)
	b = append(b, `,"family":`...)
	b = strconv.AppendInt(b, int64(r.Family), 10)
	// Addresses print as digits, dots, colons and hex: nothing to escape
	// (a zone could need it, and kernel addresses carry none).
	b = append(b, `,"local_addr":"`...)
	b = r.LocalAddr.AppendTo(b)
	b = append(b, `","local_port":`...)
	b = strconv.AppendUint(b, uint64(r.LocalPort), 10)
	b = append(b, `,"remote_addr":"`...)
	b = r.RemoteAddr.AppendTo(b)
	b = append(b, `","remote_port":`...)
	b = strconv.AppendUint(b, uint64(r.RemotePort), 10)
	b = append(b, `,"remote_host":`...)
	b = appendString(b, r.RemoteHost)
	b = append(b, `,"pid":`...)
	b = strconv.AppendUint(b, uint64(r.PID), 10)
	b = append(b, `,"comm":`...)
	b = appendString(b, r.Comm)
	b = append(b, `,"cgroup":`...)
	b = appendString(b, r.Cgroup)
	b = append(b, `,"namespace":`...)
	b = appendString(b, r.Namespace)
	b = append(b, `,"pod":`...)
	b = appendString(b, r.Pod)
	b = append(b, `,"container":`...)
	b = appendString(b, r.Container)
	b = append(b, `,"netns":`...)
	b = strconv.AppendUint(b, uint64(r.Netns), 10)
	b = append(b, `,"state":`...)
	b = appendString(b, r.State)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendUint(b, r.BytesIn, 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendUint(b, r.BytesOut, 10)
	b = append(b, `,"packets_in":`...)
	b = strconv.AppendUint(b, r.PacketsIn, 10)
	b = append(b, `,"packets_out":`...)
	b = strconv.AppendUint(b, r.PacketsOut, 10)
	b = append(b, `,"drops_in":`...)
	b = strconv.AppendUint(b, r.DropsIn, 10)
	b = append(b, `,"rate_in":`...)
	b, err := appendFloat(b, r.RateIn)
	if err != nil {
		return b, err
	}
	b = append(b, `,"rate_out":`...)
	if b, err = appendFloat(b, r.RateOut); err != nil {
		return b, err
	}
	b = append(b, `,"rtt_us":`...)
	b = strconv.AppendUint(b, uint64(r.RTTus), 10)
	b = append(b, `,"retrans":`...)
	b = strconv.AppendUint(b, uint64(r.Retrans), 10)
	b = append(b, `,"partial":`...)
	b = strconv.AppendBool(b, r.Partial)
	b = append(b, `,"read_wait_p50_us":`...)
	b = strconv.AppendUint(b, r.ReadWaitP50us, 10)
	b = append(b, `,"read_wait_p99_us":`...)
	b = strconv.AppendUint(b, r.ReadWaitP99us, 10)
	b = append(b, `,"read_wait_max_us":`...)
	b = strconv.AppendUint(b, r.ReadWaitMaxus, 10)
	b = append(b, `,"read_wait_samples":`...)
	b = strconv.AppendUint(b, r.ReadWaitSamples, 10)
	return append(b, "}\n"...), nil
}

// appendFloat writes f as encoding/json does: like ES6's number to string,
// exponent form only below 1e-6 and from 1e21, exponents unpadded.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, fmt.Errorf("json: unsupported value: %v", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // e-07 → e-7
		b = b[:n-1]
	}
	return b, nil
}

// appendString writes s as a JSON string escaped the way encoding/json
// escapes by default: quotes, backslashes and control characters, the HTML
// characters <, > and &, U+2028 and U+2029, and invalid UTF-8 as U+FFFD.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				b = append(append(b, s[start:i]...), `\ufffd`...)
			case r == '\u2028' || r == '\u2029':
				b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xF])
			default:
				i += size
				continue
			}
			i += size
			start = i
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
