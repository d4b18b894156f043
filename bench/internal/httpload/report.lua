-- SPDX-License-Identifier: Apache-2.0
-- Printed by wrk at the end of a run so the benchmark reads exact numbers
-- (microseconds, counts) instead of parsing wrk's human-readable units.
done = function(summary, latency, requests)
	local e = summary.errors
	io.write(string.format(
		'STBENCH {"requests":%d,"errors":%d,"duration_us":%.0f,"p50_us":%.1f,"p99_us":%.1f}\n',
		summary.requests, e.connect + e.read + e.write + e.status + e.timeout,
		summary.duration, latency:percentile(50), latency:percentile(99)))
end
