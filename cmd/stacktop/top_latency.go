// SPDX-License-Identifier: Apache-2.0

package main

import (
	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/latency"
)

// topLatencyFlags turn on top's stack latency view (`L`).
type topLatencyFlags struct {
	on     bool
	probes []string
}

func (l *topLatencyFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&l.on, "latency", false,
		"run the stack-latency probes too, for the L view: serve's default set (tcp-socket-read) unless --latency.probes")
	fs.StringSliceVar(&l.probes, "latency.probes", nil,
		"latency probes for the L view, comma-separated, or all (implies --latency)")
}

// hooks is the probe set the flags ask for; none without either flag.
func (l *topLatencyFlags) hooks(fs *pflag.FlagSet) (latency.HookSet, error) {
	switch {
	case fs.Changed("latency.probes"):
		return parseProbeList(l.probes)
	case l.on:
		return serveDefaultProbes, nil
	}
	return 0, nil
}
