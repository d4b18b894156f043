package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/privilege"
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
			if err := privilege.Check(true); err != nil {
				return err
			}
			rep := features.Detect()
			out := cmd.OutOrStdout()
			if format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
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
			return printConnectionHooks(out)
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text, json")
	return cmd
}
