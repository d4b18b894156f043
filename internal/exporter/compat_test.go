// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/testenv"
)

// upstreamLabels are the labels ebpf_exporter gives one key of netstacklat's
// histogram map under netstacklat.yaml, from its decoders (cloudflare/
// ebpf_exporter decoder/cgroup.go, ifname.go, static_map.go): the cgroup id
// resolved by walking /sys/fs/cgroup (inode to path, the last path walked
// wins) or "unknown_cgroup_id:<id>", the ifindex by net.InterfaceByIndex or
// "unknown:<index>", the hook through the static map.
func upstreamLabels(t *testing.T, s hist.Series) map[string]string {
	t.Helper()
	cgroups := map[uint64]string{}
	err := filepath.WalkDir("/sys/fs/cgroup", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			cgroups[info.Sys().(*syscall.Stat_t).Ino] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cgroup, ok := cgroups[s.CgroupID]
	if !ok {
		cgroup = fmt.Sprintf("unknown_cgroup_id:%d", s.CgroupID)
	}
	iface := fmt.Sprintf("unknown:%d", s.Ifindex)
	if ifc, err := net.InterfaceByIndex(int(s.Ifindex)); err == nil {
		iface = ifc.Name
	}
	return map[string]string{"cgroup": cgroup, "iface": iface, "hook": s.Hook}
}

// upstreamBuckets are ebpf_exporter's cumulative exp2 buckets for
// bucket_min 0, bucket_max 34, bucket_multiplier 0.000000001, keyed by the
// le label as Prometheus prints it.
func upstreamBuckets(h *hist.Histogram) map[string]uint64 {
	out := map[string]uint64{}
	var count uint64
	for i := 0; i <= 34; i++ {
		count += h.Buckets[i]
		out[strconv.FormatFloat(math.Exp2(float64(i))*0.000000001, 'g', -1, 64)] = count
	}
	return out
}

// With --compat ebpf_exporter the exposition has what ebpf_exporter makes of
// netstacklat's map with netstacklat.yaml, series by series and label by
// label: name, the cgroup, iface and hook labels (placeholders when not
// grouped), le values, cumulative counts and sum. Real probes, real
// datagrams from a peer namespace, grouped and not.
func TestCompatEbpfExporterMatchesUpstream(t *testing.T) {
	testenv.RequireRoot(t)
	p := testenv.NewPeer(t, "stx-compat", 110)
	for _, grouped := range []bool{false, true} {
		t.Run(fmt.Sprintf("grouped=%v", grouped), func(t *testing.T) {
			backend := testenv.Backend(t)
			tr, err := latency.Start(latency.Config{
				Backend:   backend,
				Hooks:     latency.HookSet(0).With(latency.UDPStart).With(latency.UDPSocketRead),
				Ifindexes: []uint32{uint32(p.HostIndex)}, GroupByIface: grouped, GroupByCgroup: grouped,
			})
			if err != nil && backend != features.Auto && errors.Is(err, features.ErrNoBackend) {
				testenv.Unsupported(t, "%v", err) // e.g. no netfilter links for udp-start before 6.4
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			deadline := time.Now().Add(10 * time.Second)
			var series []hist.Series
			for len(series) < 2 && time.Now().Before(deadline) {
				p.UDPToHost(t, testenv.V4, 20, 0)
				if series, err = tr.Read(); err != nil {
					t.Fatal(err)
				}
			}
			if len(series) < 2 {
				t.Fatalf("series %+v: want udp-start and udp-socket-read", series)
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(New(Config{Latency: tr, CompatEbpfExporter: true}))
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			// Read again after the scrape: the scrape's counts lie in between.
			after, err := tr.Read()
			if err != nil {
				t.Fatal(err)
			}
			var got []*dto.Metric
			for _, mf := range mfs {
				if mf.GetName() == "netstack_latency_seconds" {
					t.Error("netstack_latency_seconds exported besides the ebpf_exporter name")
				}
				if mf.GetName() == "ebpf_exporter_netstack_latency_seconds" {
					got = mf.GetMetric()
				}
			}
			if len(got) != len(after) {
				t.Fatalf("%d ebpf_exporter series, the map has %d", len(got), len(after))
			}
			// Gathered series are sorted by label values: match each to the
			// map entry upstream would have labelled the same.
			byLabels := map[string]hist.Series{}
			for _, s := range after {
				want := upstreamLabels(t, s)
				if grouped && s.Hook == "udp-start" {
					// netstacklat groups only the socket-read hooks by cgroup.
					want["cgroup"] = "unknown_cgroup_id:0"
				}
				byLabels[fmt.Sprint(want)] = s
			}
			for i, m := range got {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				s, ok := byLabels[fmt.Sprint(labels)]
				if !ok {
					t.Errorf("series %d: labels %v; upstream labels the map's entries %v", i, labels, keys(byLabels))
					continue
				}
				if !grouped && (labels["cgroup"] != "unknown_cgroup_id:0" || labels["iface"] != "unknown:0") {
					t.Errorf("ungrouped series %d: labels %v, want the placeholders", i, labels)
				}
				if grouped && s.Hook == "udp-socket-read" && labels["iface"] != p.HostIf {
					t.Errorf("grouped series %d: iface %q, want %q", i, labels["iface"], p.HostIf)
				}
				h := m.GetHistogram()
				wantBuckets := upstreamBuckets(&s.Hist)
				if len(h.GetBucket()) != len(wantBuckets) {
					t.Errorf("series %d: %d buckets, upstream has %d (le up to 17.179869184)", i, len(h.GetBucket()), len(wantBuckets))
				}
				for _, b := range h.GetBucket() {
					le := strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)
					if w, ok := wantBuckets[le]; !ok || b.GetCumulativeCount() > w {
						t.Errorf("series %d: bucket le=%s count %d; upstream le=%s count %d (at most, read after)", i, le, b.GetCumulativeCount(), le, w)
					}
				}
				if h.GetSampleCount() > s.Hist.Count() || h.GetSampleCount() == 0 {
					t.Errorf("series %d: count %d, map has %d after the scrape", i, h.GetSampleCount(), s.Hist.Count())
				}
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Interfaces and cgroups that are gone by the scrape are named as
// ebpf_exporter's decoders name them; the loopback interface and the root
// cgroup by name and absolute path.
func TestCompatEbpfExporterNamesGoneIDs(t *testing.T) {
	root, err := cgroup.Root()
	if err != nil {
		testenv.Unsupported(t, "no cgroup v2 hierarchy: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(root, &st); err != nil {
		t.Fatal(err)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	gone := series("tcp-socket-read", "", "", map[int]uint64{3: 1}, 5)
	gone.Ifindex, gone.CgroupID = 1<<30, 1<<40
	known := series("tcp-socket-read", "", "", map[int]uint64{34: 2}, 1<<35)
	known.Ifindex, known.CgroupID = uint32(lo.Index), st.Ino
	var own syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &own); err != nil {
		t.Fatal(err)
	}
	known.Netns = own.Ino // -n -1 -I: our namespace's interfaces keep ebpf_exporter's name
	// Another namespace's lo (ifindex 1 too) keeps stacktop's label.
	foreign := series("tcp-socket-read", "lo@netns:1", "", map[int]uint64{3: 1}, 5)
	foreign.Ifindex, foreign.CgroupID, foreign.Netns = uint32(lo.Index), st.Ino, 1
	e := New(Config{Latency: &fakeLatency{series: []hist.Series{gone, known, foreign}}, CompatEbpfExporter: true})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		fmt.Sprint(map[string]string{"cgroup": "unknown_cgroup_id:1099511627776", "iface": "unknown:1073741824", "hook": "tcp-socket-read"}): true,
		fmt.Sprint(map[string]string{"cgroup": root, "iface": "lo", "hook": "tcp-socket-read"}):                                              true,
		fmt.Sprint(map[string]string{"cgroup": root, "iface": "lo@netns:1", "hook": "tcp-socket-read"}):                                      true,
	}
	for _, mf := range mfs {
		if mf.GetName() != "ebpf_exporter_netstack_latency_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if !want[fmt.Sprint(labels)] {
				t.Errorf("labels %v, want one of %v", labels, keys(want))
			}
			delete(want, fmt.Sprint(labels))
			// The clamping last bucket has ebpf_exporter's finite bound.
			b := m.GetHistogram().GetBucket()
			if last := b[len(b)-1]; last.GetUpperBound() != 17.179869184 || last.GetCumulativeCount() != m.GetHistogram().GetSampleCount() {
				t.Errorf("last bucket le=%v count %d, want le=17.179869184 holding all %d", last.GetUpperBound(), last.GetCumulativeCount(), m.GetHistogram().GetSampleCount())
			}
		}
	}
	if len(want) != 0 {
		t.Errorf("missing series %v", keys(want))
	}
}
