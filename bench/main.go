// SPDX-License-Identifier: Apache-2.0

// Command bench is stacktop's benchmark suite: what running stacktop costs
// a loaded host, measured side by side with no tool and with a bpftrace
// script doing the same job. It is not part of the test suite; run it as
// root on a quiet machine with `sudo bench/run.sh` (or `make bench`), which
// builds stacktop and this harness and installs what they need.
//
// Suites:
//
//	overhead   nginx + wrk on loopback and across a veth pair, 100 and 1,000
//	           connections; rounds of each tool interleaved with baseline
//	           rounds; requests/s and p99 as ratios to the adjacent baselines,
//	           with confidence intervals, rounds added until they are narrow
//	           or the targets decided, within a time budget
//	cost       run time per invocation of every BPF program under that load,
//	           and per HTTP request next to the empty-program floor
//	userspace  CPU and RSS of `stacktop stream` tracking 1k/10k/100k idle
//	           connections, and events lost under connection churn
//	startup    time from exec to the first report; memory locked by maps
//
// The subcommands `hold` and `churn` are the connection load generators,
// which the harness runs as processes of their own; `render results.json`
// prints the report of an earlier run again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "hold":
		err = holdMain(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "churn":
		err = churnMain(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "empty":
		err = emptyMain(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "render":
		err = renderMain(os.Args[2:])
	default:
		err = benchMain(ctx, os.Args[1:])
	}
	var usage usageError
	switch {
	case err == flag.ErrHelp:
		os.Exit(2)
	case errors.As(err, &usage):
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(2)
	case errors.Is(err, errNotRoot):
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(77)
	case err != nil:
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
