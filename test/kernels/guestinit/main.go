// SPDX-License-Identifier: Apache-2.0

// Command guestinit is PID 1 of a kernel-matrix guest: it mounts what BPF
// programs and network tests need, loads the kernel modules the host packed,
// records `stacktop doctor`, runs every test suite with every backend the
// plan asks for, reports each step on the console in protocol markers, and
// powers the guest off. It never exits: PID 1 exiting panics the kernel.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/testenv"
	"github.com/stacktop/stacktop/test/kernels/protocol"
)

func main() {
	if err := run(); err != nil {
		_ = protocol.Emit(os.Stdout, protocol.Event{Kind: protocol.Failure, Reason: err.Error()})
	}
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {} // the kernel stops us; returning would panic it
}

func run() error {
	if err := mountAll(); err != nil {
		return err
	}
	_ = protocol.Emit(os.Stdout, protocol.Event{Kind: protocol.Booted, Seconds: uptime()})
	raw, err := os.ReadFile(protocol.PlanPath)
	if err != nil {
		return err
	}
	var plan protocol.Plan
	if err := json.Unmarshal(raw, &plan); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if err := loadModules(plan.Modules); err != nil {
		return err
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	doctor, err := runDoctor(plan.Stacktop)
	if err != nil {
		return err
	}
	if err := protocol.Emit(os.Stdout, protocol.Event{Kind: protocol.DoctorReport, Doctor: doctor}); err != nil {
		return err
	}
	report, err := protocol.ParseDoctor(doctor)
	if err != nil {
		return err
	}
	for _, backend := range plan.Backends {
		if reason := report.Unsupported(backend); reason != "" {
			_ = protocol.Emit(os.Stdout, protocol.Event{Kind: protocol.Unsupported, Backend: backend, Reason: reason})
			continue
		}
		// Forcing the backend auto chose for every hook would run the same
		// programs again; the guest's minutes are better spent elsewhere.
		if slices.Contains(plan.Backends, "auto") && report.SameAsAuto(backend) {
			_ = protocol.Emit(os.Stdout, protocol.Event{Kind: protocol.SameAsAuto, Backend: backend,
				Reason: fmt.Sprintf("auto chose %s for all %d hooks", backend, len(report.Choices))})
			continue
		}
		for _, s := range plan.Suites {
			if !slices.Contains(plan.Finished, protocol.SuiteRun{Package: s.Package, Backend: backend}) {
				runSuite(plan, s, backend)
			}
		}
	}
	return protocol.Emit(os.Stdout, protocol.Event{Kind: protocol.Done, Seconds: uptime()})
}

type mount struct{ fstype, target string }

// mounts is what the BPF loader, network namespaces and cgroup-aware tests
// expect to find on a normal host.
var mounts = []mount{
	{"proc", "/proc"},
	{"sysfs", "/sys"},
	{"devtmpfs", "/dev"},
	{"tmpfs", "/run"},
	{"tmpfs", "/tmp"},
	{"debugfs", "/sys/kernel/debug"},
	{"tracefs", "/sys/kernel/tracing"},
	{"bpf", "/sys/fs/bpf"},
	{"cgroup2", "/sys/fs/cgroup"},
}

func mountAll() error {
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil && !errors.Is(err, unix.EROFS) {
			return fmt.Errorf("mkdir %s: %w", m.target, err)
		}
		if err := unix.Mount(m.fstype, m.target, m.fstype, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
	}
	return nil
}

func loadModules(paths []string) error {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("loading module %s: %w", p, err)
		}
	}
	return nil
}

func loopbackUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

func runDoctor(stacktop string) (json.RawMessage, error) {
	var out, errOut bytes.Buffer
	cmd := exec.Command(stacktop, "doctor", "--format", "json")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("stacktop doctor: %w: %s", err, errOut.String())
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, out.Bytes()); err != nil {
		return nil, fmt.Errorf("stacktop doctor printed no JSON: %w", err)
	}
	return compact.Bytes(), nil
}

func runSuite(plan protocol.Plan, s protocol.Suite, backend string) {
	_ = protocol.Emit(os.Stdout, protocol.Event{Kind: protocol.Begin, Suite: s.Package, Backend: backend})
	args := []string{"-test.v", "-test.count=" + strconv.Itoa(max(plan.TestCount, 1)), "-test.timeout=" + plan.SuiteTimeout}
	if plan.TestRun != "" {
		args = append(args, "-test.run="+plan.TestRun)
	}
	cmd := exec.Command(s.Path, args...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	cmd.Env = append(os.Environ(), "CI=true", "PATH=/bin", "HOME=/tmp",
		testenv.BackendEnv+"="+backend, testenv.BinaryEnv+"="+plan.Stacktop, testenv.GuestEnv+"=1")
	start := time.Now()
	code := 0
	if err := cmd.Run(); err != nil {
		code = -1
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else {
			fmt.Printf("cannot run %s: %v\n", s.Path, err)
		}
	}
	_ = protocol.Emit(os.Stdout, protocol.Event{Kind: protocol.End, Suite: s.Package, Backend: backend,
		ExitCode: code, Seconds: time.Since(start).Seconds()})
}

// uptime is the guest's seconds since boot, which under emulation is the
// honest measure of how long booting took.
func uptime() float64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}
