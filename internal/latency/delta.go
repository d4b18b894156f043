// SPDX-License-Identifier: Apache-2.0

package latency

import "github.com/stacktop/stacktop/internal/hist"

// Intervals turns the cumulative histograms of successive reads into what
// each interval between them added (latency --delta, the TUI's latency
// view): a histogram that did not move is then empty, and a tail that
// appeared a minute ago is not drowned by an hour of history. The first
// read's interval is the time since the probes were attached.
type Intervals struct {
	prev map[hist.Series]hist.Histogram // keyed by the series' labels (Hist zero)
}

// Next returns the part of each series recorded since the previous call.
func (iv *Intervals) Next(series []hist.Series) []hist.Series {
	seen := make(map[hist.Series]hist.Histogram, len(series))
	out := make([]hist.Series, len(series))
	for i, s := range series {
		key := s
		key.Hist = hist.Histogram{}
		prev := iv.prev[key]
		seen[key] = s.Hist
		out[i] = s
		out[i].Hist = s.Hist.Since(&prev)
	}
	iv.prev = seen
	return out
}
