// SPDX-License-Identifier: Apache-2.0

package output

import (
	"encoding/csv"
	"io"
	"strconv"
	"time"

	"github.com/stacktop/stacktop/internal/conn"
)

// timeFormat is RFC 3339 with the precision JSON records use.
const timeFormat = time.RFC3339Nano

// csvTime is RFC 3339 with milliseconds, so that sub-second refreshes stay
// distinct; every row of one refresh carries the same value.
const csvTime = "2006-01-02T15:04:05.000Z07:00"

// Header is the CSV header row of --format csv and --log. lost and map_full
// are the cumulative loss counters at that refresh, repeated on each row.
var Header = []string{"ts", "event", "proto", "family", "local_addr", "local_port", "remote_addr",
	"remote_port", "remote_host", "pid", "comm", "cgroup", "namespace", "pod", "container", "netns", "state", "bytes_in", "bytes_out", "packets_in",
	"packets_out", "drops_in", "rate_in", "rate_out", "rtt_us", "retrans", "partial",
	"read_wait_p50_us", "read_wait_p99_us", "read_wait_max_us", "read_wait_samples", "lost", "map_full"}

// CSV writes one row per connection per refresh.
type CSV struct {
	w          *csv.Writer
	needHeader bool
}

// NewCSV returns a CSV writer; header says whether to start with the header row.
func NewCSV(w io.Writer, header bool) *CSV {
	return &CSV{w: csv.NewWriter(w), needHeader: header}
}

func (c *CSV) Write(s conn.Snapshot) error {
	if c.needHeader {
		if err := c.w.Write(Header); err != nil {
			return err
		}
		c.needHeader = false
	}
	ts := s.Time.Format(csvTime)
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	for _, r := range s.Records {
		row := []string{ts, string(r.Event), r.Proto, strconv.Itoa(r.Family),
			r.LocalAddr.String(), u(uint64(r.LocalPort)), r.RemoteAddr.String(), u(uint64(r.RemotePort)), r.RemoteHost,
			u(uint64(r.PID)), r.Comm, r.Cgroup, r.Namespace, r.Pod, r.Container, u(uint64(r.Netns)), r.State,
			u(r.BytesIn), u(r.BytesOut), u(r.PacketsIn), u(r.PacketsOut), u(r.DropsIn),
			strconv.FormatFloat(r.RateIn, 'f', 1, 64), strconv.FormatFloat(r.RateOut, 'f', 1, 64),
			u(uint64(r.RTTus)), u(uint64(r.Retrans)), strconv.FormatBool(r.Partial),
			u(r.ReadWaitP50us), u(r.ReadWaitP99us), u(r.ReadWaitMaxus), u(r.ReadWaitSamples),
			u(s.Lost), u(s.MapFull)}
		if err := c.w.Write(row); err != nil {
			return err
		}
	}
	c.w.Flush()
	return c.w.Error()
}
