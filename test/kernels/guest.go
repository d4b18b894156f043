// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/stacktop/stacktop/test/kernels/debian"
	"github.com/stacktop/stacktop/test/kernels/initramfs"
	"github.com/stacktop/stacktop/test/kernels/protocol"
)

// busyboxApplets get links in /bin so tests and people debugging a guest
// find the usual tools.
var busyboxApplets = []string{"sh", "ip", "cat", "ls", "mount", "ps", "sleep", "ping", "nc", "dmesg", "sysctl"}

// writeInitramfs packs the guest's root file system.
func writeInitramfs(file string, a *artifacts, plan protocol.Plan, modules []debian.Module, busybox string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	w := initramfs.NewWriter(f)
	w.CharDevice("dev/console", 5, 1)
	w.CopyFile("init", a.init)
	w.CopyFile(plan.Stacktop, a.stacktop)
	w.CopyFile("bin/busybox", busybox)
	for _, applet := range busyboxApplets {
		w.Symlink("bin/"+applet, "busybox")
	}
	for i, m := range modules {
		w.CopyFile(plan.Modules[i], m.Path)
	}
	for i, s := range a.suites {
		w.CopyFile(plan.Suites[i].Path, s.path)
		w.Dir(plan.Suites[i].Dir)
		if err := w.CopyTreeFunc(plan.Suites[i].Dir, s.dir, dataFile(s.dir)); err != nil {
			return err
		}
	}
	// Suites run in /src/<package>, so ../../docs reaches the documents
	// that tests check the code against (docs/METRICS.md), as in the
	// repository.
	if isDir(a.docs) {
		if err := w.CopyTree("src/docs", a.docs); err != nil {
			return err
		}
	}
	raw, err := json.MarshalIndent(plan, "", "  ")
	if err != nil {
		return err
	}
	w.File(protocol.PlanPath, 0o644, raw)
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

func newPlan(a *artifacts, modules []debian.Module, cfg config) protocol.Plan {
	p := protocol.Plan{Stacktop: "/bin/stacktop", Backends: cfg.backends,
		SuiteTimeout: cfg.suiteTimeout.String(), TestRun: cfg.run, TestCount: cfg.count}
	for _, m := range modules {
		p.Modules = append(p.Modules, "/lib/modules/"+m.Name+".ko")
	}
	for _, s := range a.suites {
		p.Suites = append(p.Suites, protocol.Suite{Package: s.name, Path: "/suites/" + path.Base(s.path),
			Dir: path.Join("/src", s.name)})
	}
	return p
}

// bootResult is one guest run as the host saw it.
type bootResult struct {
	protocol.Result
	Wall     time.Duration // qemu start to exit
	TimedOut bool
	// Stopped says why the runner stopped the guest before it ended or
	// timed out: a lockup that is an emulator fault (lockupFault).
	Stopped string
	ExitErr error  // qemu's own failure, if any
	Log     string // console log file
}

// stallQuiet is how long a stall's reports must have been silent before
// the runner judges them: the kernel prints a report in one burst, and a
// judgement before the last CPU's dump could miss one of our programs.
const stallQuiet = 5 * time.Second

// boot runs the guest under TCG with cpus vCPUs and feeds its console to a
// Collector; each line also goes to the log and, if tee is set, to tee.
func boot(ctx context.Context, img *debian.Image, initrd, logFile string, cpus int, cfg config, tee io.Writer) (*bootResult, error) {
	log, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(ctx, cfg.kernelTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.qemu,
		"-accel", "tcg", "-m", cfg.memory, "-smp", strconv.Itoa(cpus),
		"-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", img.Vmlinuz, "-initrd", initrd,
		// Only warnings and worse (levels below 5) reach the console, so
		// kernel chatter does not interleave with markers, but a WARN that
		// taints the kernel before an oops is there to read; panic=-1 plus
		// -no-reboot turns a panic into qemu exiting instead of a hang.
		"-append", "console=ttyS0 loglevel=5 panic=-1 oops=panic rdinit=/init")
	cmd.Stdin = nil
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cfg.qemu, err)
	}
	lines := make(chan string)
	var readErr error
	go func() {
		readErr = protocol.Lines(stdout, func(line string) { lines <- line })
		close(lines)
	}()
	// A guest whose CPUs loop on a stray int3 never recovers: once its
	// stall reports say so, it is stopped at once instead of at -timeout.
	var c protocol.Collector
	var stopped string
	stallSize, judged := 0, 0
	var stallGrew time.Time
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for open := true; open; {
		select {
		case line, ok := <-lines:
			if !ok {
				open = false
				break
			}
			fmt.Fprintln(log, line)
			if tee != nil {
				fmt.Fprintf(tee, "[%s] %s\n", img.Name, line)
			}
			c.Line(line)
			if n := c.Result.Stall.Size(); n != stallSize {
				stallSize, stallGrew = n, time.Now()
			}
		case <-tick.C:
			if stopped != "" || stallSize == judged || time.Since(stallGrew) < stallQuiet {
				continue
			}
			judged = stallSize
			if fault := lockupFault(c.Result.Stall); fault != "" {
				stopped = fault
				fmt.Fprintf(log, "stacktop-matrix: stopping the guest: %s\n", fault)
				cancel()
			}
		}
	}
	waitErr := cmd.Wait()
	res := &bootResult{Result: c.Result, Wall: time.Since(start), Log: logFile, Stopped: stopped,
		TimedOut: stopped == "" && errors.Is(ctx.Err(), context.DeadlineExceeded)}
	if waitErr != nil && !res.TimedOut && stopped == "" {
		res.ExitErr = fmt.Errorf("qemu: %w: %s", waitErr, strings.TrimSpace(stderr.String()))
	}
	if readErr != nil && !res.TimedOut && stopped == "" {
		res.ExitErr = errors.Join(res.ExitErr, readErr)
	}
	return res, nil
}

// lastStep says where a guest that stopped reporting got stuck.
func (r *bootResult) lastStep() string {
	switch n := len(r.Runs); {
	case r.BootSeconds == 0:
		return "before init started (kernel boot)"
	case r.Doctor == nil:
		return "while stacktop doctor ran"
	case n > 0 && !r.Runs[n-1].Ended:
		return fmt.Sprintf("while %s ran with backend %s", r.Runs[n-1].Suite, r.Runs[n-1].Backend)
	default:
		return "after the last step it reported"
	}
}

// problems lists why a guest run is not a pass, in the words a person
// reading CI output needs.
func (r *bootResult) problems(timeout time.Duration) []string {
	var out []string
	if r.TimedOut {
		out = append(out, fmt.Sprintf("guest hung: killed after %s %s", timeout, r.lastStep()))
	}
	if r.Stopped != "" {
		out = append(out, fmt.Sprintf("guest stopped %s: %s", r.lastStep(), r.Stopped))
	}
	if r.Panic != "" {
		out = append(out, "kernel panic: "+r.Panic)
	}
	if r.ExitErr != nil {
		out = append(out, r.ExitErr.Error())
	}
	out = append(out, r.Failures...)
	if !r.Done && !r.TimedOut && r.Stopped == "" && r.Panic == "" {
		out = append(out, "guest stopped before finishing its plan")
	}
	for _, run := range r.Runs {
		if !run.Ended {
			continue
		}
		for _, t := range run.Tests {
			if t.Status == protocol.Fail {
				out = append(out, fmt.Sprintf("%s [%s] %s failed", run.Suite, run.Backend, t.Name))
			}
		}
		if run.ExitCode != 0 {
			out = append(out, fmt.Sprintf("%s [%s] exited %d", run.Suite, run.Backend, run.ExitCode))
		}
	}
	return out
}
