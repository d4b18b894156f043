// SPDX-License-Identifier: Apache-2.0

package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/attach"
	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/cliflag"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/hist"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/privilege"
	"github.com/stacktop/stacktop/internal/runopts"
	"github.com/stacktop/stacktop/internal/selector"
)

// latencyFlags are netstacklat's options, with its short letters and meaning.
type latencyFlags struct {
	run           runopts.Options
	list          bool
	probes        probeFlags
	groupProcess  bool
	debugCounters bool
	slow          slowFlags
	delta         bool // --delta: each report counts its own interval
	summary       bool // --summary: one line per series
}

// maxSampleEvery bounds --sample: beyond a million, a busy host's histograms
// would still fill, an idle one's would stay empty for hours.
const maxSampleEvery = 1_000_000

// maxMinQueue bounds -q as netstacklat does: no socket queue holds more.
const maxMinQueue = 65536

// probeFlags select and filter the latency probes; serve shares them.
type probeFlags struct {
	enable      []string
	disable     []string
	sel         selector.Specs
	minQueue    int
	groupIface  bool
	groupCgroup bool
	includeHOL  bool
	sample      int
	backend     string
	at          []string
	fs          *pflag.FlagSet // to tell an explicitly empty -e or -d from none
}

// netstacklatNames maps netstacklat's long option names to ours, so both work.
var netstacklatNames = map[string]string{
	"report-interval":       "interval",
	"pids":                  "pid",
	"interfaces":            "interface",
	"network-namespace":     "netns",
	"cgroups":               "cgroup",
	"groupby-interface":     "group-by-interface",
	"groupby-cgroup":        "group-by-cgroup",
	"include-tcp-hol-delay": "include-hol-delay",
}

func newLatencyCmd() *cobra.Command {
	var f latencyFlags
	cmd := &cobra.Command{
		Use:   "latency",
		Short: "Histograms of how long received packets wait inside the host network stack (netstacklat)",
		Long: `latency measures, in the kernel, how long received packets have been inside the
host network stack when they reach each layer (now - the packet's RX software
timestamp) and prints log2 histograms every --interval and once more on exit.
Counts are cumulative since start; with --delta each report counts only its
own interval (the first, since start). --summary prints one line per probe
instead: count, p50, p99 and max, each the bound of its log2 bucket.
Probes, from the wire up:

  ip-start             reached IP (netfilter PRE_ROUTING, first priority)
  tcp-start/udp-start  reached TCP/UDP (netfilter LOCAL_IN, last priority)
  *-socket-enqueued    queued on the socket (sk_data_ready)
  *-socket-read        read by the application (sock_recv_length)

and, only when named (-e nic), from the NIC's own hardware receive stamp:

  nic                  stamped by the kernel (net:netif_receive_skb), counted
                       from the NIC's stamp (its PHC, converted every 2s);
                       frames the NIC did not stamp count as no_hw_stamp.
                       stacktop doctor shows which interfaces stamp what.

-p, -c and -q apply to the socket-read probes, -C groups only those (the
reading task's pid and cgroup), as in netstacklat. -P groups only those by
the reading process (pid and comm); the other probes run in softirq context,
where the current task is whoever was interrupted, and are reported under
pid 0, comm "-".

--slow DURATION also prints, as it happens, every packet whose latency at an
enabled probe exceeds DURATION: the probe, the latency, the connection (or
the packet's addresses), interface, namespace and, at the socket-read
probes, the reading process. At most --slow-limit per second; events not
printed are counted after each report.

--sample N records a random 1 in N packets (reads, at the socket-read
probes), decided before anything else about the packet is read: the
histograms then count samples, not packets, and say "sampled 1 in N".

--at SPEC adds a probe at any tracepoint or kernel function that takes an
skb: tracepoint:CATEGORY:NAME (tp_btf) or fentry:FUNCTION (where the kernel
allows fentry); the skb argument is found in the kernel's BTF, and SPEC names
the probe's histograms and events. -e may name a SPEC too, to measure there
alone. See docs/LATENCY.md.`,
		Example: `  stacktop latency                       # all probes, report every 5s
  stacktop latency -e tcp-socket-read -C # time until reads, per cgroup
  stacktop latency -e tcp-socket-read -P # time until reads, per process
  stacktop latency -i eth0 -I -r 1 --format json
  stacktop latency -e tcp-socket-read --slow 50ms   # which reads waited over 50ms
  stacktop latency -e tracepoint:net:netif_receive_skb # only there: the backlog queue
  stacktop latency --at fentry:ip_local_deliver     # the seven probes and one more
  stacktop latency --delta --summary -r 1 # one line per probe per second
  stacktop latency -l                    # probes and the backend each uses`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runLatency(cmd, &f) },
	}
	fs := cmd.Flags()
	f.run.Register(fs, "r", 5*time.Second, "text", "json")
	fs.BoolVarP(&f.list, "list-probes", "l", false, "list the probes, the backend each would use, its programs and on what event each runs, and why other backends were refused")
	f.probes.register(fs)
	fs.BoolVarP(&f.groupProcess, "group-by-process", "P", false, "one histogram per reading process, pid and comm (socket-read probes; the others under pid 0)")
	fs.BoolVar(&f.debugCounters, "debug-counters", false, "with each report, print per probe how many packets were recorded or skipped and why")
	fs.BoolVar(&f.delta, "delta", false, "each report counts only its own interval, not everything since start")
	fs.BoolVar(&f.summary, "summary", false, "one line per probe: count, p50, p99, max (log2 bucket bounds)")
	f.slow.register(fs)
	return cmd
}

// probeHelp says what the selector flags select for the latency probes.
var probeHelp = selector.Help{
	PID:       "only reads by these processes (socket-read probes)",
	Cgroup:    "only reads by tasks in these cgroups (socket-read probes)",
	Interface: "only packets received on these interfaces",
	Netns:     "network namespaces to measure in (-1 follows new ones)",
}

// register adds netstacklat's probe flags to fs, under its names too.
func (f *probeFlags) register(fs *pflag.FlagSet) {
	f.fs = fs
	fs.StringSliceVarP(&f.enable, "enable-probes", "e", nil, "only these probes (comma-separated)")
	fs.StringSliceVarP(&f.disable, "disable-probes", "d", nil, "all probes but these (comma-separated)")
	cliflag.Enum(fs, "enable-probes", hookList(latency.AllHooks)...)
	cliflag.Enum(fs, "disable-probes", hookList(latency.AllHooks)...)
	f.sel.Register(fs, probeHelp, "0")
	cliflag.IntVarP(fs, &f.minQueue, "min-queuelength", "q", 0, 0, maxMinQueue, "only reads that leave at least this many packets queued (socket-read probes)")
	fs.BoolVarP(&f.groupIface, "group-by-interface", "I", false, "one histogram per interface")
	fs.BoolVarP(&f.groupCgroup, "group-by-cgroup", "C", false, "one histogram per cgroup of the reading task (socket-read probes)")
	fs.BoolVarP(&f.includeHOL, "include-hol-delay", "y", false, "include TCP reads that may have waited for a lost segment (head-of-line blocking)")
	cliflag.IntVarP(fs, &f.sample, "sample", "", 1, 1, maxSampleEvery, "record a random 1 in N packets (reads, at the socket-read probes): cheaper on busy hosts; counts are then of samples")
	registerBackend(fs, &f.backend, "hook implementation: auto, fentry, tracepoint (of the built-in probes)")
	fs.StringArrayVar(&f.at, "at", nil, fmt.Sprintf("also measure at `SPEC`, tracepoint:CATEGORY:NAME or fentry:FUNCTION, a point taking an skb (repeatable, at most %d)", latency.MaxAt))
	cliflag.Aliases(fs, netstacklatNames)
}

func runLatency(cmd *cobra.Command, f *latencyFlags) error {
	if err := f.run.Validate(); err != nil {
		return err
	}
	cfg, sel, err := f.probes.config()
	if err != nil {
		return err
	}
	// Grouping nothing would print the ungrouped histograms as if grouped.
	if f.groupProcess && !cfg.Hooks.Has(latency.TCPSocketRead) && !cfg.Hooks.Has(latency.UDPSocketRead) {
		return clierr.Usage("group-by-process", "", "groups the socket-read probes only, "+
			"and neither tcp-socket-read nor udp-socket-read is enabled (enabled: %s)", hookNames(cfg.Hooks))
	}
	cfg.GroupByProcess = f.groupProcess
	if err := f.slow.config(&cfg); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.list {
		return listProbes(out, cfg)
	}
	if err := privilege.Check(latencyNeeds(cfg)...); err != nil {
		return err
	}
	ctx, cancel := runopts.SignalContext(cmd.Context())
	defer cancel()
	tr, err := latency.Start(cfg)
	if err != nil {
		return fmt.Errorf("%w (see `stacktop doctor`)", err)
	}
	defer tr.Close()
	losses := lossWatch{untimed: map[string]uint64{}}
	var mu sync.Mutex // one report or slow event at a time
	rep := reporter{format: f.run.Format, summary: f.summary, counters: f.debugCounters}
	if f.delta {
		rep.intervals = &latency.Intervals{}
	}
	var slow *slowPrinter
	if cfg.Slow > 0 {
		slow = startSlowPrinter(tr, out, f.run.Format, &mu)
	}
	return f.run.Loop(ctx, func(final bool) error {
		if final && slow != nil {
			if err := slow.drain(); err != nil {
				return err
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if err := rep.report(out, tr); err != nil {
			return err
		}
		if slow != nil {
			if err := slow.summary(out, time.Now()); err != nil {
				return err
			}
		}
		if counters, err := tr.Counters(); err == nil {
			losses.warn(counters)
		}
		// The kernel filters by index and id: a re-created interface or
		// cgroup would silently count nothing, so stop and say so.
		return sel.Gone()
	})
}

// untimedShare is the share of a probe's reads seen but not timed (its
// fifo_full and read_untracked counters) from which every report where it
// grew warns: otherwise only --debug-counters shows it.
const untimedShare = 0.01

// lossWatch warns, at the reports where they grew, of samples lost for want
// of room in the histogram map and of a visible share of reads not timed.
type lossWatch struct {
	dropped uint64
	untimed map[string]uint64 // by probe
}

func (w *lossWatch) warn(counters []latency.Counter) {
	var dropped uint64
	recorded, untimed := map[string]uint64{}, map[string]uint64{}
	for _, c := range counters {
		switch c.Reason {
		case latency.ReasonHistFull:
			dropped += c.Count
		case latency.ReasonRecorded:
			recorded[c.Hook] += c.Count
		case latency.ReasonFIFOFull, latency.ReasonReadUntracked:
			untimed[c.Hook] += c.Count
		}
	}
	if dropped > w.dropped {
		slog.Warn("samples dropped: more probe/interface/cgroup/process combinations than the histogram map holds",
			"dropped", dropped)
	}
	w.dropped = dropped
	for hook, n := range untimed {
		share := float64(n) / float64(n+recorded[hook])
		if n > w.untimed[hook] && share >= untimedShare {
			slog.Warn("reads seen but not timed (--debug-counters says why: fifo_full, read_untracked)",
				"probe", hook, "untimed", n, "share", fmt.Sprintf("%.1f%%", 100*share))
		}
		w.untimed[hook] = n
	}
}

// reporter prints the reports of one run of latency.
type reporter struct {
	format    string
	summary   bool               // --summary
	counters  bool               // --debug-counters
	intervals *latency.Intervals // --delta, else nil
}

func (r reporter) writer() func(io.Writer, time.Time, []hist.Series) error {
	switch {
	case r.summary && r.format == "json":
		return latency.WriteSummaryJSON
	case r.summary:
		return latency.WriteSummaryText
	case r.format == "json":
		return latency.WriteJSON
	}
	return latency.WriteText
}

// report prints the histograms (and the debug counters when asked) once.
func (r reporter) report(w io.Writer, tr *latency.Tracer) error {
	now := time.Now()
	series, err := tr.Read()
	if err != nil {
		return err
	}
	if r.intervals != nil {
		series = r.intervals.Next(series)
	}
	if err := r.writer()(w, now, series); err != nil {
		return err
	}
	if !r.counters {
		return nil
	}
	format := r.format
	counters, err := tr.Counters()
	if err != nil {
		return err
	}
	if format == "json" {
		return json.NewEncoder(w).Encode(map[string]any{"ts": now, "debug_counters": counters})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROBE\tREASON\tPACKETS")
	for _, c := range counters {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", c.Hook, c.Reason, c.Count)
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}

// latencyNeeds is what the chosen probes need beyond loading programs: the
// netfilter hooks (unless forced to fentry) CAP_NET_ADMIN, and CAP_SYS_ADMIN
// to attach them in other namespaces.
func latencyNeeds(cfg latency.Config) []privilege.Need {
	if cfg.Hooks&latency.NetfilterHooks == 0 || cfg.Backend == features.FentryBE {
		return nil
	}
	needs := []privilege.Need{{Cap: privilege.NetAdmin, Why: "to attach the netfilter hooks ip-start, tcp-start and udp-start; -e socket probes or --backend fentry need none"}}
	if cfg.Netns != 0 {
		needs = append(needs, privilege.Need{Cap: privilege.SysAdmin, Why: "to attach netfilter hooks in other network namespaces (-n)"})
	}
	return needs
}

// listProbes attaches every selected probe to learn which backend it gets,
// prints the list and detaches again; refusals follow the table. Without
// the privileges to attach, it lists the probes and says why the backends
// are unknown.
func listProbes(w io.Writer, cfg latency.Config) error {
	var choices []features.Choice
	unprivileged := privilege.Check(latencyNeeds(cfg)...)
	if unprivileged == nil {
		var err error
		if choices, err = latency.Probe(cfg.Backend, cfg.At...); choices == nil {
			return err // nothing could be loaded at all
		}
	}
	type row struct {
		name, enabled, description string
		programs                   func(features.Backend) []latency.Program
	}
	var rows []row
	for _, h := range latency.Hooks {
		enabled := "yes"
		if !cfg.Hooks.Has(h) {
			enabled = "no"
		}
		rows = append(rows, row{h.String(), enabled, h.Description(),
			func(b features.Backend) []latency.Program { return latency.Programs(h, b) }})
	}
	for _, a := range cfg.At {
		rows = append(rows, row{a.String(), "yes", a.Description(), a.Programs})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROBE\tENABLED\tBACKEND\tPROGRAMS (ONE RUN PER)\tDESCRIPTION")
	var notes []string
	for i, r := range rows {
		backend, progs := "unknown", "-"
		if choices != nil {
			c := choices[i]
			backend = cmp.Or(string(c.Backend), "none")
			var names []string
			for _, p := range r.programs(c.Backend) {
				names = append(names, fmt.Sprintf("%s (%s)", p.Name, p.RunsPer))
			}
			progs = cmp.Or(strings.Join(names, ", "), "-")
			for _, ref := range c.Refused {
				notes = append(notes, fmt.Sprintf("%s: %s refused: %s", r.name, ref.Backend, ref.Reason))
			}
			if c.Backend == "" && len(c.Refused) == 0 {
				notes = append(notes, fmt.Sprintf("%s: no %s program implements it yet", r.name, cfg.Backend))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.name, r.enabled, backend, progs, r.description)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if unprivileged != nil {
		notes = append(notes, "backends unknown: they are learnt by attaching each probe, and "+unprivileged.Error())
	} else if cfg.Hooks.Has(latency.TCPSocketRead) {
		notes = append(notes, "tcp-socket-read: now is "+latency.TCPReadClock().Why)
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(notes, "\n"))
	}
	return nil
}

// config validates the probe flags; errors name the flag and the value
// (exit 2). The selection is returned too, for serve's connections.
func (f *probeFlags) config() (latency.Config, selector.Selection, error) {
	var cfg latency.Config
	var sel selector.Selection
	var err error
	if cfg.Backend, err = features.ParseBackend(f.backend); err != nil {
		return cfg, sel, err
	}
	var specs []string // -e's --at specs
	if cfg.Hooks, specs, err = f.hooks(); err != nil {
		return cfg, sel, err
	}
	if cfg.At, err = f.atProbes(specs); err != nil {
		return cfg, sel, err
	}
	if cfg.Hooks == 0 && len(cfg.At) == 0 {
		return cfg, sel, clierr.Usage("disable-probes", strings.Join(f.disable, ","), "leaves no probe enabled")
	}
	if sel, err = f.sel.Parse(); err != nil {
		return cfg, sel, err
	}
	cfg.Select(sel)
	cfg.MinQueueLen, cfg.SampleEvery = uint32(f.minQueue), uint32(f.sample)
	cfg.GroupByIface, cfg.GroupByCgroup, cfg.IncludeHOL = f.groupIface, f.groupCgroup, f.includeHOL
	return cfg, sel, nil
}

// hooks returns the built-in probes -e/-d select and the --at specs -e
// names (a name with a colon).
func (f *probeFlags) hooks() (latency.HookSet, []string, error) {
	if len(f.enable) > 0 && len(f.disable) > 0 {
		return 0, nil, clierr.Usage("disable-probes", strings.Join(f.disable, ","),
			"cannot be combined with --enable-probes %q", strings.Join(f.enable, ","))
	}
	set := latency.DefaultHooks
	if len(f.enable) > 0 {
		set = 0
	}
	var specs []string
	for flag, names := range map[string][]string{"enable-probes": f.enable, "disable-probes": f.disable} {
		if len(names) == 0 && f.fs != nil && f.fs.Changed(flag) {
			return 0, nil, clierr.Usage(flag, "", "names no probe (leave the flag out for all of them)")
		}
		for _, name := range names {
			if strings.Contains(name, ":") {
				if flag == "disable-probes" {
					return 0, nil, clierr.Usage(flag, name, "names the built-in probes only (an --at probe runs when given)")
				}
				specs = append(specs, name)
				continue
			}
			h, err := latency.ParseHook(name)
			if err != nil {
				return 0, nil, clierr.Usage(flag, name, "%v, or an --at spec", err)
			}
			if flag == "enable-probes" {
				set = set.With(h)
			} else {
				set = set.Without(h)
			}
		}
	}
	return set, specs, nil
}

// atProbes checks the --at specs, then those -e named, against the kernel:
// a spec that names no point taking an skb exits 2 naming --at (or -e) and
// the spec; a point given twice is one probe.
func (f *probeFlags) atProbes(fromEnable []string) ([]latency.At, error) {
	var out []latency.At
	seen := map[string]bool{}
	add := func(flag, spec string) error {
		a, err := latency.ParseAt(spec)
		var bad *attach.PointError
		if errors.As(err, &bad) {
			return clierr.Usage(flag, spec, "%s", bad.Reason)
		}
		if err != nil {
			return fmt.Errorf("--%s %q: %w", flag, spec, err)
		}
		if seen[a.String()] {
			return nil
		}
		if len(out) == latency.MaxAt {
			return clierr.Usage(flag, spec, "at most %d --at probes", latency.MaxAt)
		}
		seen[a.String()] = true
		out = append(out, a)
		return nil
	}
	for _, spec := range f.at {
		if err := add("at", spec); err != nil {
			return nil, err
		}
	}
	for _, spec := range fromEnable {
		if err := add("enable-probes", spec); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// hookNames lists the hooks in set, comma-separated, in probe order.
func hookNames(set latency.HookSet) string { return strings.Join(hookList(set), ",") }

// hookList names the hooks in set, in probe order.
func hookList(set latency.HookSet) []string {
	var names []string
	for _, h := range latency.Hooks {
		if set.Has(h) {
			names = append(names, h.String())
		}
	}
	return names
}
