package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/stacktop/stacktop/internal/clierr"
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
accepted it and, if not, the error it answered with.`,
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
			hooks := probeHooks()
			readClock := latency.TCPReadClock()
			stamping, err := hwstamp.InspectAll()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					*features.Report
					Hooks        map[string][]features.Choice `json:"hooks"`
					TCPReadClock latency.ReadClock            `json:"tcp_read_clock"`
					NICStamping  []hwstamp.Interface          `json:"nic_stamping"`
				}{rep, hooks, readClock, stamping})
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
			return writeNICStamping(out, stamping)
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text, json")
	return cmd
}

// hookProbers attach each command's hooks once and report the backend each
// got; a command with hooks adds its line here.
var hookProbers = map[string]func() ([]features.Choice, error){
	"latency":    func() ([]features.Choice, error) { return latency.Probe(features.Auto) },
	"top/stream": func() ([]features.Choice, error) { return conntrack.Probe() },
}

// probeHooks runs every prober; a hook no backend could attach shows up with
// an empty backend and its refusals, so the error itself adds nothing.
func probeHooks() map[string][]features.Choice {
	out := map[string][]features.Choice{}
	for cmd, probe := range hookProbers {
		out[cmd], _ = probe()
	}
	return out
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
