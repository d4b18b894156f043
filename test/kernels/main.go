// SPDX-License-Identifier: Apache-2.0

// Command kernels is the kernel matrix: it boots Debian's cloud kernels in
// qemu under TCG with a busybox initramfs holding stacktop and the static
// test binaries of every integration suite, runs the suites there with every
// backend the kernel supports, and reports each guest's results and exit
// status; -write-kernels-md turns the guests' `stacktop doctor` reports into
// docs/KERNELS.md.
//
//	go run ./test/kernels                  # all kernels
//	go run ./test/kernels -kernel 6.1      # one kernel
//	go run ./test/kernels -write-kernels-md docs/KERNELS.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/stacktop/stacktop/internal/testenv"
	"github.com/stacktop/stacktop/test/kernels/debian"
	"github.com/stacktop/stacktop/test/kernels/kernelsmd"
	"github.com/stacktop/stacktop/test/kernels/protocol"
)

type config struct {
	kernels       []debian.Kernel
	cacheDir      string
	mirror        string
	backends      []string
	modules       []string
	packages      []string
	run           string
	count         int
	cpus          int
	parallel      int
	retries       int
	kernelTimeout time.Duration
	suiteTimeout  time.Duration
	memory        string
	qemu          string
	busybox       string
	kernelsMD     string
	verbose       bool
	keep          bool
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("kernels", flag.ContinueOnError)
	var cfg config
	var kernels, backends, modules, packages string
	cache := os.Getenv("STACKTOP_KERNEL_CACHE")
	if cache == "" {
		cache = "/var/cache/stacktop-kernels"
	}
	fs.StringVar(&kernels, "kernel", "", "comma-separated kernels to run (5.10, 6.1, 6.12, sid or their suite names); default all")
	fs.StringVar(&cfg.cacheDir, "cache", cache, "where downloaded and unpacked kernels are kept between runs ($STACKTOP_KERNEL_CACHE)")
	fs.StringVar(&cfg.mirror, "mirror", "", "Debian archive URI; default: the one in /etc/apt/sources.list*")
	fs.StringVar(&backends, "backends", "auto,fentry,tracepoint", "backends every suite runs with ($"+testenv.BackendEnv+" in the guest)")
	// The guest cannot autoload modules (no modprobe, no modules.alias), so
	// everything a suite may need is loaded up front: veth for netns peers,
	// tun for TAP devices (fresh RX timestamps), tbf and netem qdiscs for
	// queueing delay, tcp_diag and udp_diag for sock_diag socket dumps.
	fs.StringVar(&modules, "modules", "veth,tun,sch_tbf,sch_netem,tcp_diag,udp_diag",
		"kernel modules to load in the guest (dependencies follow)")
	fs.StringVar(&packages, "packages", "", "comma-separated packages to test; default every package whose tests use internal/testenv")
	fs.StringVar(&cfg.run, "run", "", "only tests matching this regexp (go test -run)")
	fs.IntVar(&cfg.count, "count", 1, "run each test this many times (go test -count), to repeat a rare failure")
	fs.IntVar(&cfg.cpus, "cpus", 2, "vCPUs of a guest's first boot; a boot again after an infrastructure fault has one")
	fs.IntVar(&cfg.parallel, "parallel", 2, "guests booted at once")
	fs.IntVar(&cfg.retries, "retries", 1, "boots again a guest that died of an infrastructure fault (kernel never reached init, "+
		"TCG tripping over live code patching) up to this many times; failed tests are never retried")
	fs.DurationVar(&cfg.kernelTimeout, "timeout", 10*time.Minute, "limit for one guest from power-on to power-off")
	fs.DurationVar(&cfg.suiteTimeout, "suite-timeout", 5*time.Minute, "limit for one suite binary in a guest")
	fs.StringVar(&cfg.memory, "memory", "1G", "guest memory")
	fs.StringVar(&cfg.qemu, "qemu", "qemu-system-x86_64", "qemu binary")
	fs.StringVar(&cfg.busybox, "busybox", "/bin/busybox", "statically linked busybox for the guest")
	fs.StringVar(&cfg.kernelsMD, "write-kernels-md", "", "write the kernel × feature/hook tables to this file (e.g. docs/KERNELS.md)")
	fs.BoolVar(&cfg.verbose, "v", false, "stream every guest console line to stdout")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the work directory (initramfs, console logs)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.kernels = debian.Kernels
	if kernels != "" {
		cfg.kernels = nil
		for _, name := range splitList(kernels) {
			k, ok := debian.Lookup(name)
			if !ok {
				return cfg, fmt.Errorf("invalid -kernel %q: must be one of 5.10, 6.1, 6.12, sid (or bullseye, bookworm, trixie)", name)
			}
			cfg.kernels = append(cfg.kernels, k)
		}
	}
	for _, b := range splitList(backends) {
		if b != "auto" && b != "fentry" && b != "tracepoint" {
			return cfg, fmt.Errorf("invalid -backends %q: %q is not one of auto, fentry, tracepoint", backends, b)
		}
		cfg.backends = append(cfg.backends, b)
	}
	if len(cfg.backends) == 0 {
		return cfg, fmt.Errorf("invalid -backends %q: name at least one backend", backends)
	}
	if cfg.parallel < 1 {
		return cfg, fmt.Errorf("invalid -parallel %d: must be at least 1", cfg.parallel)
	}
	if cfg.count < 1 {
		return cfg, fmt.Errorf("invalid -count %d: must be at least 1", cfg.count)
	}
	if cfg.cpus < 1 {
		return cfg, fmt.Errorf("invalid -cpus %d: must be at least 1", cfg.cpus)
	}
	if cfg.retries < 0 {
		return cfg, fmt.Errorf("invalid -retries %d: must be 0 or more", cfg.retries)
	}
	if cfg.suiteTimeout >= cfg.kernelTimeout {
		return cfg, fmt.Errorf("invalid -suite-timeout %s: must be shorter than -timeout %s", cfg.suiteTimeout, cfg.kernelTimeout)
	}
	cfg.modules, cfg.packages = splitList(modules), splitList(packages)
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	ok, err := run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// outcome is one kernel's run, for the summary and KERNELS.md.
type outcome struct {
	kernel  debian.Kernel
	img     *debian.Image
	res     *bootResult // the last boot
	retried []attempt   // earlier boots that died of an infrastructure fault
	err     error       // the guest could not even be booted
}

func run(ctx context.Context, cfg config) (bool, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	root, err := moduleRoot()
	if err != nil {
		return false, err
	}
	if cfg.mirror == "" {
		if cfg.mirror, err = debian.MirrorFromSystem(); err != nil {
			return false, err
		}
	}
	work, err := os.MkdirTemp("", "stacktop-kernels-")
	if err != nil {
		return false, err
	}
	ok, retried := false, false
	defer func() {
		// Console logs of failed guests, and of boots that were retried,
		// are what a person needs next.
		if cfg.keep || !ok || retried {
			log.Info("kept work directory (initramfs, console logs)", "dir", work)
		} else {
			os.RemoveAll(work)
		}
	}()
	start := time.Now()
	a, err := build(ctx, root, work, cfg.packages)
	if err != nil {
		return false, err
	}
	log.Info("built guest binaries", "suites", len(a.suites), "took", time.Since(start).Round(time.Millisecond))

	cache := &debian.Cache{Dir: cfg.cacheDir, Mirror: cfg.mirror, MaxListAge: 24 * time.Hour, Log: log}
	var tee io.Writer
	if cfg.verbose {
		tee = &lockedWriter{w: os.Stdout}
	}
	outcomes := make([]outcome, len(cfg.kernels))
	sem := make(chan struct{}, cfg.parallel)
	var wg sync.WaitGroup
	for i, k := range cfg.kernels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			outcomes[i] = runKernel(ctx, cfg, cache, a, work, k, tee, log)
		}()
	}
	wg.Wait()

	ok = report(os.Stdout, cfg, outcomes)
	for _, o := range outcomes {
		retried = retried || len(o.retried) > 0
	}
	if cfg.kernelsMD != "" {
		if err := writeKernelsMD(ctx, cfg, a, outcomes); err != nil {
			return false, err
		}
	}
	return ok, nil
}

func runKernel(ctx context.Context, cfg config, cache *debian.Cache, a *artifacts, work string, k debian.Kernel, tee io.Writer, log *slog.Logger) outcome {
	o := outcome{kernel: k}
	o.img, o.err = cache.Fetch(ctx, k)
	if o.err != nil {
		return o
	}
	modules, err := o.img.Modules(cfg.modules)
	if err != nil {
		o.err = err
		return o
	}
	plan := newPlan(a, modules, cfg)
	initrd := filepath.Join(work, "initramfs-"+k.Name+".cpio.gz")
	if err := writeInitramfs(initrd, a, plan, modules, cfg.busybox); err != nil {
		o.err = fmt.Errorf("initramfs: %w", err)
		return o
	}
	o.res, o.retried, o.err = bootRetrying(cfg, func(n int) (*bootResult, error) {
		log.Info("booting", "kernel", k.Name, "release", o.img.Release, "attempt", n)
		return boot(ctx, o.img, initrd, consoleLog(work, k.Name, n), guestCPUs(n, cfg.cpus), cfg, tee)
	}, func(dead attempt, finished []*protocol.Run) error {
		log.Warn("guest died of an infrastructure fault, booting it again for the runs it had not finished",
			"kernel", k.Name, "fault", dead.fault, "console", dead.res.Log, "finished", len(finished))
		plan.Finished = plan.Finished[:0]
		for _, r := range finished {
			plan.Finished = append(plan.Finished, protocol.SuiteRun{Package: r.Suite, Backend: r.Backend})
		}
		return writeInitramfs(initrd, a, plan, modules, cfg.busybox)
	})
	return o
}

// report prints one block per kernel and says whether all passed.
func report(w io.Writer, cfg config, outcomes []outcome) bool {
	ok := true
	var failed []outcome
	for _, o := range outcomes {
		if o.err != nil {
			fmt.Fprintf(w, "FAIL kernel %s: %v\n", o.kernel.Name, o.err)
			ok = false
			failed = append(failed, o)
			continue
		}
		problems := o.res.problems(cfg.kernelTimeout)
		status := "PASS"
		if len(problems) > 0 {
			status, ok = "FAIL", false
		}
		booted := "never reached init"
		if o.res.BootSeconds > 0 {
			booted = fmt.Sprintf("booted in %.1fs", o.res.BootSeconds)
		}
		fmt.Fprintf(w, "%s kernel %s (%s, %.1f MB of packages): %s, guest ran %s%s\n", status, o.kernel.Name,
			o.img.Release, float64(o.img.DebBytes)/1e6, booted, o.res.Wall.Round(100*time.Millisecond), attemptNote(o))
		for i, a := range o.retried {
			fmt.Fprintf(w, "  attempt %d: infrastructure fault after %s, booted again: %s\n", i+1,
				a.res.Wall.Round(100*time.Millisecond), a.fault)
			fmt.Fprintf(w, "    console log: %s\n", a.res.Log)
		}
		for _, u := range o.res.Unsupported {
			fmt.Fprintf(w, "  backend %s: unsupported: %s\n", u.Backend, u.Reason)
		}
		for _, u := range o.res.SameAsAuto {
			fmt.Fprintf(w, "  backend %s: not run again, same as auto: %s\n", u.Backend, u.Reason)
		}
		for _, r := range o.res.Runs {
			fmt.Fprintf(w, "  %-22s %-10s %s\n", r.Suite, r.Backend, summarize(r))
			for _, t := range r.Tests {
				if t.Status != protocol.Skip {
					continue
				}
				kind, reason := t.SkipKind()
				fmt.Fprintf(w, "    %s %s: %s\n", t.Name, kind, reason)
			}
		}
		if len(problems) > 0 {
			fmt.Fprintf(w, "  console log: %s\n", o.res.Log)
			tail(w, o.res)
			failed = append(failed, o)
		}
	}
	// Last, because CI shows the end of a long output: what failed, and
	// what the failing tests said.
	for _, o := range failed {
		if o.err != nil {
			fmt.Fprintf(w, "FAILED kernel %s: %v\n", o.kernel.Name, o.err)
			continue
		}
		fmt.Fprintf(w, "FAILED kernel %s (%s):\n", o.kernel.Name, o.img.Release)
		for _, p := range o.res.problems(cfg.kernelTimeout) {
			fmt.Fprintf(w, "  problem: %s\n", p)
		}
		if fault := infrastructureFault(o.res, cfg.kernelTimeout); fault != "" {
			fmt.Fprintf(w, "  infrastructure fault, no retry left (-retries %d): %s\n", cfg.retries, fault)
		}
		stallEvidence(w, o.res.Stall)
		failedTestLogs(w, o.res)
	}
	return ok
}

// stallEvidence prints where each CPU dumped by a stall report was, and
// which of our programs was on its path: what tells a lockup of ours from
// the emulator's.
func stallEvidence(w io.Writer, s *protocol.Stall) {
	const maxDumps = 8
	if s == nil {
		return
	}
	fmt.Fprintf(w, "  %d stall report(s), the first: %s\n", s.Reports, s.First)
	for i, c := range s.CPUs {
		if i == maxDumps {
			fmt.Fprintf(w, "    (%d more CPU dumps in the console log)\n", len(s.CPUs)-maxDumps)
			break
		}
		at, _ := protocol.CodeAt(c.Code)
		fmt.Fprintf(w, "    CPU %d at %ss: %s, code % x", c.CPU, c.Time, c.RIP, at[:min(len(at), 5)])
		switch {
		case c.TrapRIP != "" && c.Int3:
			fmt.Fprintf(w, ", trapped on an int3 before %s", c.TrapRIP)
		case c.TrapRIP != "":
			fmt.Fprintf(w, ", interrupting %s", c.TrapRIP)
		}
		if c.Ours != "" {
			fmt.Fprintf(w, "; our program on its path: %s", c.Ours)
		}
		fmt.Fprintln(w)
	}
}

// failedTestLogs prints what each failed test logged (its last lines).
func failedTestLogs(w io.Writer, r *bootResult) {
	const maxLines = 30
	for _, run := range r.Runs {
		for _, t := range run.Tests {
			if t.Status != protocol.Fail {
				continue
			}
			fmt.Fprintf(w, "  --- %s [%s] %s:\n", run.Suite, run.Backend, t.Name)
			msgs := t.Messages
			if len(msgs) > maxLines {
				fmt.Fprintf(w, "    (%d earlier lines in the console log)\n", len(msgs)-maxLines)
				msgs = msgs[len(msgs)-maxLines:]
			}
			for _, m := range msgs {
				fmt.Fprintf(w, "    %s\n", m)
			}
		}
	}
}

// attemptNote says which boot the result is from, when it is not the first.
func attemptNote(o outcome) string {
	if len(o.retried) == 0 {
		return ""
	}
	return fmt.Sprintf(" (attempt %d)", len(o.retried)+1)
}

func summarize(r *protocol.Run) string {
	counts := map[string]int{}
	notInGuest := 0
	for _, t := range r.Tests {
		counts[t.Status]++
		if _, ok := t.NotInGuest(); ok {
			notInGuest++
		}
	}
	end := fmt.Sprintf("exit %d in %.1fs", r.ExitCode, r.Seconds)
	if !r.Ended {
		end = "did not finish"
	}
	skipped := fmt.Sprintf("%d skipped", counts[protocol.Skip])
	if notInGuest > 0 {
		skipped += fmt.Sprintf(" (%d not in the guest image)", notInGuest)
	}
	return fmt.Sprintf("%d passed, %d failed, %s, %s", counts[protocol.Pass], counts[protocol.Fail], skipped, end)
}

// tail shows the last console lines of a failed guest, where a panic, a hang
// or a failing test leaves its trace.
func tail(w io.Writer, r *bootResult) {
	b, err := os.ReadFile(r.Log)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	for _, l := range lines {
		fmt.Fprintf(w, "  | %s\n", l)
	}
}

func writeKernelsMD(ctx context.Context, cfg config, a *artifacts, outcomes []outcome) error {
	var cols []kernelsmd.Column
	for _, o := range outcomes {
		if o.err != nil || o.res.Doctor == nil {
			return fmt.Errorf("not writing %s: kernel %s gave no doctor report", cfg.kernelsMD, o.kernel.Name)
		}
		res := o.res.Result
		col := kernelsmd.Column{Name: o.kernel.Name, Suite: o.kernel.Suite, Boot: res.BootSeconds,
			Doctor: res.Doctor, Result: &res}
		for _, a := range o.retried {
			col.Retried = append(col.Retried, a.fault)
		}
		cols = append(cols, col)
	}
	host, err := exec.CommandContext(ctx, a.stacktop, "doctor", "--format", "json").Output()
	if err != nil {
		return fmt.Errorf("stacktop doctor on the host: %w", err)
	}
	cols = append(cols, kernelsmd.Column{Name: "host", Doctor: host})
	f, err := os.Create(cfg.kernelsMD)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := kernelsmd.Write(f, "go run ./test/kernels -write-kernels-md "+cfg.kernelsMD, cols); err != nil {
		return err
	}
	return f.Close()
}

// moduleRoot is the directory of go.mod, so the runner works from any
// directory inside the repository.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run inside the stacktop module")
	}
	return filepath.Dir(gomod), nil
}

// lockedWriter keeps lines of guests booted side by side whole.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// guestCPUs is the vCPU count of boot attempt n: first (-cpus), and one
// once the emulator has killed a guest (retries follow only infrastructure
// faults, almost always a stray int3 of live code patching). With one vCPU
// no other vCPU can run a stale translation of code being patched, which
// is how TCG trips over the int3; a 6.12 guest has died of it four times
// in a row.
func guestCPUs(attempt, first int) int {
	if attempt > 1 {
		return 1
	}
	return first
}
