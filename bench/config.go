// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stacktop/stacktop/bench/internal/tool"
)

// config is everything a run is parameterised by; the defaults make the
// full run fit in 50 minutes on a 2-core machine.
type config struct {
	Stacktop string
	Command  string // how the run was invoked, for the report
	Out      string
	Suites   []string
	Tools    []string // compared tools, without the baseline
	// Rounds is the minimum and MaxRounds the maximum number of rounds of
	// each tool per overhead configuration; rounds are added while a ratio
	// is wider than ±Precision and its target undecided, within Budget.
	Rounds     int
	MaxRounds  int
	Precision  float64
	Budget     time.Duration // the whole run's maximum
	Duration   time.Duration
	Conns      []int
	Paths      []string
	Workloads  []string
	Scale      []int
	Churn      int
	Namespaces int
	Window     time.Duration
	Pin        bool
	Profile    bool
	Port       int
}

var (
	allSuites = []string{"overhead", "cost", "userspace", "startup"}
	allPaths  = []string{"loopback", "veth"}
	// The overhead and cost suites' HTTP workloads: keep-alive connections
	// (each wrk connection carries every request of its round), and one
	// connection per request (Connection: close), where what a tool does
	// per connection shows.
	allWorkloads = []string{workloadKeepAlive, workloadClose}
)

const (
	workloadKeepAlive = "keepalive"
	workloadClose     = "close"
)

func parseConfig(args []string) (config, error) {
	c := config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&c.Stacktop, "stacktop", "", "stacktop binary to measure (required)")
	fs.StringVar(&c.Command, "command", "", "the invocation to show in the report (bench/run.sh passes its own)")
	fs.StringVar(&c.Out, "out", "", "directory for results.json, report.md and tool logs (default: a new one under /tmp)")
	suites := fs.String("suites", strings.Join(allSuites, ","), "suites to run")
	tools := fs.String("tools", "latency,latency-read,stream,serve,bpftrace,bpftrace-tcptop", "tools to compare with the baseline")
	fs.IntVar(&c.Rounds, "rounds", 3, "overhead: minimum rounds of each tool per path and connection count")
	fs.IntVar(&c.MaxRounds, "max-rounds", 10, "overhead: maximum rounds of each tool per path and connection count")
	fs.Float64Var(&c.Precision, "precision", 0.015, "overhead: add rounds until each ratio's 95% interval is within ± this (or its target is decided)")
	fs.DurationVar(&c.Budget, "budget", 50*time.Minute, "the whole run's maximum time; overhead rounds beyond -rounds stop when it is spent")
	fs.DurationVar(&c.Duration, "duration", 5*time.Second, "overhead and cost: wrk run time per round (whole seconds)")
	conns := fs.String("conns", "100,1000", "overhead: wrk concurrent connections")
	paths := fs.String("paths", strings.Join(allPaths, ","), "overhead: loopback, veth (wrk in a peer namespace)")
	workloads := fs.String("workloads", strings.Join(allWorkloads, ","), "overhead and cost: keepalive, close (one connection per request)")
	scale := fs.String("scale", "1000,10000,100000", "userspace: idle connections tracked")
	fs.IntVar(&c.Churn, "churn", 20000, "userspace: connections opened and closed per second (0: skip)")
	fs.IntVar(&c.Namespaces, "namespaces", 50, "userspace: network namespaces with one idle connection each (0: skip)")
	fs.DurationVar(&c.Window, "window", 10*time.Second, "userspace: CPU sampling window and churn duration")
	fs.BoolVar(&c.Pin, "pin", runtime.NumCPU() >= 2, "pin the nginx worker to CPU 0 and wrk to CPU 1")
	fs.BoolVar(&c.Profile, "profile", false, "userspace: after each window, profile the stream with perf for as long (perf report in -out)")
	fs.IntVar(&c.Port, "port", 18150, "first of the TCP ports the benchmark uses (it takes four)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return c, err
		}
		return c, usageError{err}
	}
	if err := c.validate(*suites, *tools, *paths, *workloads, *conns, *scale); err != nil {
		return c, usageError{err}
	}
	var err error
	if c.Out == "" {
		if c.Out, err = os.MkdirTemp("", "stacktop-bench-"); err != nil {
			return c, err
		}
	} else if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return c, err
	}
	return c, nil
}

// usageError is a flag whose value cannot be used: the harness exits 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func (c *config) validate(suites, tools, paths, workloads, conns, scale string) error {
	var err error
	if c.Suites, err = names(suites, "suites", allSuites); err != nil {
		return err
	}
	if c.Tools, err = names(tools, "tools", slices.DeleteFunc(tool.Names(), func(n string) bool { return n == "none" })); err != nil {
		return err
	}
	if c.Paths, err = names(paths, "paths", allPaths); err != nil {
		return err
	}
	if c.Workloads, err = names(workloads, "workloads", allWorkloads); err != nil {
		return err
	}
	if c.Conns, err = counts(conns, "conns"); err != nil {
		return err
	}
	if c.Scale, err = counts(scale, "scale"); err != nil {
		return err
	}
	switch {
	case c.Stacktop == "" && slices.ContainsFunc(c.Tools, isStacktop):
		return errors.New("-stacktop is required (bench/run.sh builds it)")
	case c.Rounds < 1:
		return fmt.Errorf("-rounds %d: must be at least 1", c.Rounds)
	case c.MaxRounds < c.Rounds:
		return fmt.Errorf("-max-rounds %d: must be at least -rounds (%d)", c.MaxRounds, c.Rounds)
	case !(c.Precision > 0 && c.Precision < 1): // NaN fails too
		return fmt.Errorf("-precision %v: must be above 0 and below 1", c.Precision)
	case c.Duration < time.Second:
		return fmt.Errorf("-duration %v: must be at least 1s", c.Duration)
	case c.Window < time.Second:
		return fmt.Errorf("-window %v: must be at least 1s", c.Window)
	case len(c.Workloads) == 0 && (c.has("overhead") || c.has("cost")):
		return errors.New("-workloads: names none, and the overhead and cost suites need one")
	case c.Churn < 0:
		return fmt.Errorf("-churn %d: must not be negative", c.Churn)
	case c.Namespaces < 0 || c.Namespaces > 1000:
		return fmt.Errorf("-namespaces %d: must be between 0 and 1000", c.Namespaces)
	case c.Port < 1024 || c.Port > 65535-4:
		return fmt.Errorf("-port %d: must be between 1024 and 65531", c.Port)
	}
	if least := c.leastTime(); c.Budget < least {
		return fmt.Errorf("-budget %v: too short for these suites with -rounds %d, which need about %v",
			c.Budget, c.Rounds, least.Round(time.Minute))
	}
	return nil
}

func isStacktop(name string) bool {
	t, _ := tool.Named(name)
	return t.Command != ""
}

func names(list, flagName string, known []string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("-%s: unknown %q (known: %s)", flagName, n, strings.Join(known, ", "))
		}
		out = append(out, n)
	}
	return out, nil
}

func counts(list, flagName string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-%s: %q is not a positive count", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// Ports and addresses of the run, derived from -port.
func (c config) nginxPort() uint16 { return uint16(c.Port) }
func (c config) servePort() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(c.Port+1))
}
func (c config) holdPort() uint16  { return uint16(c.Port + 2) }
func (c config) churnPort() uint16 { return uint16(c.Port + 3) }

func (c config) has(suite string) bool { return slices.Contains(c.Suites, suite) }

// toolStartup is what starting, attaching and stopping a tool adds to a
// round, measured on the 2-core VM (bpftrace is the slowest).
const toolStartup = 4 * time.Second

// estimate is how long the run will take at most, so a user can decide
// before starting it: the budget, unless the maximum rounds take less.
func (c config) estimate() time.Duration {
	return min(c.Budget, c.otherSuites()+c.overheadTime(c.MaxRounds))
}

// leastTime is how long the run takes with the minimum rounds.
func (c config) leastTime() time.Duration { return c.otherSuites() + c.overheadTime(c.Rounds) }

// overheadBudget is the time the overhead suite may take: what the budget
// leaves after the other suites.
func (c config) overheadBudget() time.Duration { return c.estimate() - c.otherSuites() }

// overheadTime is how long the overhead suite takes with reps rounds of
// every tool: per path and connection count a 1 s warm-up, then each tool
// round followed by a baseline round, after a first baseline round.
func (c config) overheadTime(reps int) time.Duration {
	if !c.has("overhead") {
		return 0
	}
	pairs := time.Duration(len(c.Tools) * reps)
	perConfig := time.Second + c.Duration + pairs*(c.Duration+toolStartup+c.Duration)
	return time.Duration(len(c.Workloads)*len(c.Conns)*len(c.Paths)) * perConfig
}

func (c config) otherSuites() time.Duration {
	var d time.Duration
	if c.has("cost") {
		d += time.Duration(len(c.Workloads)*(len(c.Tools)+1)) * (c.Duration + toolStartup) // and the empty program
	}
	if c.has("userspace") {
		d += time.Duration(len(c.Scale)) * (2*c.Window + 20*time.Second)
		if c.Churn > 0 {
			d += 2 * (c.Window + 5*time.Second) // stream, then serve
		}
		if c.Namespaces > 0 {
			d += c.Window + 20*time.Second
		}
	}
	if c.has("startup") {
		d += 30 * time.Second
	}
	return d
}
