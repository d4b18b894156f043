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
// full run fit in about 20 minutes on a 2-core machine.
type config struct {
	Stacktop string
	Command  string // how the run was invoked, for the report
	Out      string
	Suites   []string
	Tools    []string // compared tools, without the baseline
	Rounds   int      // rounds of each tool per overhead configuration
	Duration time.Duration
	Conns    []int
	Paths    []string
	Scale    []int
	Churn    int
	Window   time.Duration
	Pin      bool
	Profile  bool
	Port     int
}

var (
	allSuites = []string{"overhead", "cost", "userspace", "startup"}
	allPaths  = []string{"loopback", "veth"}
)

func parseConfig(args []string) (config, error) {
	c := config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&c.Stacktop, "stacktop", "", "stacktop binary to measure (required)")
	fs.StringVar(&c.Command, "command", "", "the invocation to show in the report (bench/run.sh passes its own)")
	fs.StringVar(&c.Out, "out", "", "directory for results.json, report.md and tool logs (default: a new one under /tmp)")
	suites := fs.String("suites", strings.Join(allSuites, ","), "suites to run")
	tools := fs.String("tools", "latency,stream,serve,bpftrace", "tools to compare with the baseline")
	fs.IntVar(&c.Rounds, "rounds", 3, "overhead: rounds of each tool per path and connection count")
	fs.DurationVar(&c.Duration, "duration", 8*time.Second, "overhead and cost: wrk run time per round (whole seconds)")
	conns := fs.String("conns", "100,1000", "overhead: wrk concurrent connections")
	paths := fs.String("paths", strings.Join(allPaths, ","), "overhead: loopback, veth (wrk in a peer namespace)")
	scale := fs.String("scale", "1000,10000,100000", "userspace: idle connections tracked")
	fs.IntVar(&c.Churn, "churn", 10000, "userspace: connections opened and closed per second (0: skip)")
	fs.DurationVar(&c.Window, "window", 10*time.Second, "userspace: CPU sampling window and churn duration")
	fs.BoolVar(&c.Pin, "pin", runtime.NumCPU() >= 2, "pin the nginx worker to CPU 0 and wrk to CPU 1")
	fs.BoolVar(&c.Profile, "profile", false, "userspace: after each window, profile the stream with perf for as long (perf report in -out)")
	fs.IntVar(&c.Port, "port", 18150, "first of the TCP ports the benchmark uses (it takes four)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.Suites, err = names(*suites, "suites", allSuites); err != nil {
		return c, err
	}
	if c.Tools, err = names(*tools, "tools", slices.DeleteFunc(tool.Names(), func(n string) bool { return n == "none" })); err != nil {
		return c, err
	}
	if c.Paths, err = names(*paths, "paths", allPaths); err != nil {
		return c, err
	}
	if c.Conns, err = counts(*conns, "conns"); err != nil {
		return c, err
	}
	if c.Scale, err = counts(*scale, "scale"); err != nil {
		return c, err
	}
	switch {
	case c.Stacktop == "" && slices.ContainsFunc(c.Tools, isStacktop):
		return c, errors.New("-stacktop is required (bench/run.sh builds it)")
	case c.Rounds < 1:
		return c, fmt.Errorf("-rounds %d: must be at least 1", c.Rounds)
	case c.Duration < time.Second:
		return c, fmt.Errorf("-duration %v: must be at least 1s", c.Duration)
	case c.Window < time.Second:
		return c, fmt.Errorf("-window %v: must be at least 1s", c.Window)
	case c.Churn < 0:
		return c, fmt.Errorf("-churn %d: must not be negative", c.Churn)
	case c.Port < 1024 || c.Port > 65535-4:
		return c, fmt.Errorf("-port %d: must be between 1024 and 65531", c.Port)
	}
	if c.Out == "" {
		if c.Out, err = os.MkdirTemp("", "stacktop-bench-"); err != nil {
			return c, err
		}
	} else if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return c, err
	}
	return c, nil
}

func isStacktop(name string) bool { return name != "bpftrace" }

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

// estimate is how long the run will take, roughly, so a user can decide
// before starting it.
func (c config) estimate() time.Duration {
	var d time.Duration
	perRound := c.Duration + 4*time.Second // tool start-up and settling
	if c.has("overhead") {
		toolRounds := len(c.Tools) * c.Rounds
		perConfig := time.Second + time.Duration(toolRounds)*perRound + time.Duration(toolRounds+1)*c.Duration
		d += time.Duration(len(c.Conns)*len(c.Paths)) * perConfig
	}
	if c.has("cost") {
		d += time.Duration(len(c.Tools)) * perRound
	}
	if c.has("userspace") {
		d += time.Duration(len(c.Scale)) * (2*c.Window + 20*time.Second)
		if c.Churn > 0 {
			d += c.Window + 5*time.Second
		}
	}
	if c.has("startup") {
		d += 30 * time.Second
	}
	return d
}
