// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/cliflag"
	"github.com/stacktop/stacktop/internal/conntrack"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/hwstamp"
	"github.com/stacktop/stacktop/internal/latency"
	"github.com/stacktop/stacktop/internal/privilege"
	"github.com/stacktop/stacktop/internal/termsafe"
)

func newDoctorCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Show what this kernel allows and why refused attachments were refused",
		Long: `doctor loads and attaches a minimal program of every kind stacktop may use
(fentry, fexit, tp_btf, raw_tp, netfilter links, kprobes, iterators, cgroup_skb)
and checks the maps and helpers it relies on. Each line says whether the kernel
accepted it and, if not, the error it answered with. It ends with a verdict
per command: whether it runs here, with which backends, and which hooks it
does without (degraded) or which probes see nothing (blind). It exits 1 only
when a command cannot run here; a refused backend that another one stands in
for is not a problem.`,
		Example: `  stacktop doctor                # what this kernel allows, each hook's backend, a verdict per command
  stacktop doctor --format json  # the same, for a bug report`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return clierr.Usage("format", format, "must be one of text, json")
			}
			// Loading is all doctor needs; whatever else is missing shows as refusals.
			if err := privilege.Check(); err != nil {
				return err
			}
			rep := features.Detect()
			hooks, errs := probeHooks()
			verdicts := judge(hooks, errs)
			readClock := latency.TCPReadClock()
			stamping, err := hwstamp.InspectAll()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(struct {
					*features.Report
					Hooks        map[string][]features.Choice `json:"hooks"`
					TCPReadClock latency.ReadClock            `json:"tcp_read_clock"`
					NICStamping  []hwstamp.Interface          `json:"nic_stamping"`
					Verdicts     []verdict                    `json:"verdicts"`
				}{rep, hooks, readClock, stamping, verdicts}); err != nil {
					return err
				}
				return cannotRun(verdicts)
			}
			fmt.Fprintf(out, "kernel %s\n\n", rep.Kernel)
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FEATURE\tSTATUS\tREASON")
			for _, p := range rep.Probes {
				status := "ok"
				if !p.OK {
					status = "refused"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, status, p.Reason)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if err := writeHookChoices(out, hooks); err != nil {
				return err
			}
			if _, err := fmt.Fprintf(out, "\ntcp-socket-read clock: %s\n", readClock.Why); err != nil {
				return err
			}
			if err := writeNICStamping(out, stamping); err != nil {
				return err
			}
			if err := writeVerdicts(out, verdicts); err != nil {
				return err
			}
			return cannotRun(verdicts)
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text, json")
	cliflag.Enum(cmd.Flags(), "format", "text", "json")
	return cmd
}

// hookProbers attach each command's hooks once and report the backend each
// got; a command with hooks adds its line here.
var hookProbers = map[string]func() ([]features.Choice, error){
	"latency":    func() ([]features.Choice, error) { return latency.Probe(features.Auto) },
	"top/stream": func() ([]features.Choice, error) { return conntrack.Probe() },
}

// probeHooks runs every prober; a hook no backend could attach shows up with
// an empty backend and its refusals. The error says whether the command
// could start (a hook it needs is missing).
func probeHooks() (map[string][]features.Choice, map[string]error) {
	out, errs := map[string][]features.Choice{}, map[string]error{}
	for cmd, probe := range hookProbers {
		out[cmd], errs[cmd] = probe()
	}
	return out, errs
}

// writeNICStamping says, per interface, whether the nic probe can measure
// its packets: whether its driver stamps received packets in hardware, what
// it stamps now and with which clock.
func writeNICStamping(w io.Writer, ifcs []hwstamp.Interface) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nINTERFACE\tRX HW STAMPS\tFILTER\tPHC\tNOTE")
	for _, i := range ifcs {
		hw, filter, phc := "no", "-", "-"
		if i.RXHardware {
			hw = "yes"
		}
		if i.Filter != "" {
			filter = i.Filter
		}
		if i.PHC >= 0 {
			phc = fmt.Sprintf("/dev/ptp%d", i.PHC)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", termsafe.String(i.Name), hw, filter, phc, i.Why)
	}
	return tw.Flush()
}

func writeHookChoices(w io.Writer, hooks map[string][]features.Choice) error {
	cmds := make([]string, 0, len(hooks))
	for c := range hooks {
		cmds = append(cmds, c)
	}
	sort.Strings(cmds)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nCOMMAND\tHOOK\tBACKEND\tREFUSED")
	for _, cmd := range cmds {
		for _, c := range hooks[cmd] {
			backend := string(c.Backend)
			if backend == "" {
				backend = "none"
			}
			refused := make([]string, len(c.Refused))
			for i, r := range c.Refused {
				refused[i] = fmt.Sprintf("%s: %s", r.Backend, r.Reason)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cmd, c.Hook, backend, strings.Join(refused, "; "))
		}
	}
	return tw.Flush()
}

// verdict is doctor's conclusion for one command.
type verdict struct {
	Command  string   `json:"command"`
	Runs     bool     `json:"runs"`
	Backends []string `json:"backends,omitempty"` // the backends its hooks got
	// Degraded are optional connection hooks no backend could attach: the
	// command works without them, knowing less. Blind are latency probes no
	// backend could attach: they see nothing.
	Degraded []string `json:"degraded,omitempty"`
	Blind    []string `json:"blind,omitempty"`
	Missing  string   `json:"missing,omitempty"` // why it cannot run
}

// judge concludes per command. The connection tracker cannot start without
// a hook it needs (errs says which); latency runs with the probes that
// attached; serve needs the tracker and its default probe, tcp-socket-read.
func judge(hooks map[string][]features.Choice, errs map[string]error) []verdict {
	conns := verdict{Command: "top/stream", Runs: errs["top/stream"] == nil}
	conns.Backends, conns.Degraded = attached(hooks["top/stream"])
	if !conns.Runs {
		conns.Missing = errs["top/stream"].Error()
	}
	lat := verdict{Command: "latency", Runs: true}
	lat.Backends, lat.Blind = attached(hooks["latency"])
	if len(lat.Backends) == 0 {
		lat.Runs, lat.Missing = false, "no latency probe attaches"
	}
	serve := conns
	serve.Command = "serve"
	serve.Backends = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(conns.Backends), lat.Backends...))))
	serve.Blind = lat.Blind
	if serve.Runs && slices.Contains(lat.Blind, latency.TCPSocketRead.String()) {
		serve.Runs, serve.Missing = false, "its default latency probe, tcp-socket-read, attaches with no backend (choose others with --latency.probes)"
	}
	return []verdict{conns, lat, serve}
}

// attached returns the backends choices got, and the hooks that got none.
func attached(choices []features.Choice) (backends, without []string) {
	for _, c := range choices {
		if c.Backend == "" {
			without = append(without, c.Hook)
		} else if !slices.Contains(backends, string(c.Backend)) {
			backends = append(backends, string(c.Backend))
		}
	}
	slices.Sort(backends)
	return backends, without
}

func writeVerdicts(w io.Writer, verdicts []verdict) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nCOMMAND\tVERDICT")
	for _, v := range verdicts {
		if !v.Runs {
			fmt.Fprintf(tw, "%s\tcannot run here: %s\n", v.Command, v.Missing)
			continue
		}
		line := "runs (" + strings.Join(v.Backends, ", ") + ")"
		if len(v.Degraded) > 0 {
			line += "; degraded, without " + strings.Join(v.Degraded, ", ")
		}
		if len(v.Blind) > 0 {
			line += "; blind at " + strings.Join(v.Blind, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\n", v.Command, line)
	}
	return tw.Flush()
}

// cannotRun is the error doctor exits with when a command cannot run here.
func cannotRun(verdicts []verdict) error {
	var cannot []string
	for _, v := range verdicts {
		if !v.Runs {
			cannot = append(cannot, v.Command)
		}
	}
	if len(cannot) == 0 {
		return nil
	}
	return fmt.Errorf("%s cannot run here: see the verdict above", strings.Join(cannot, ", "))
}
