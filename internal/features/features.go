// SPDX-License-Identifier: Apache-2.0

// Package features probes what the running kernel lets us load and attach,
// and records why anything was refused, so that hook selection and
// `stacktop doctor` speak from the same facts.
package features

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Probe is one capability of the kernel and the outcome of trying it.
type Probe struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"` // why it was refused; empty when OK
}

// Names of the probes, used as keys by callers that need one answer.
const (
	BTF           = "btf"
	Fentry        = "fentry"
	Fexit         = "fexit"
	TPBTF         = "tp_btf"
	RawTP         = "raw_tp"
	Netfilter     = "netfilter_link"
	Kprobe        = "kprobe"
	IterTCP       = "iter_tcp"
	RingBuf       = "ringbuf"
	SkStorage     = "sk_storage"
	SkStorageBTF  = "sk_storage_tracing" // bpf_sk_storage_get from fentry/tp_btf programs (5.11+)
	KtimeTAI      = "bpf_ktime_get_tai_ns"
	CgroupSKB     = "cgroup_skb"
	StatsEnabled  = "bpf_stats_enabled"
	probeFunction = "tcp_v4_rcv" // exists on every kernel we support
)

// Report is the outcome of all probes, in a stable order.
type Report struct {
	Kernel string  `json:"kernel"`
	Probes []Probe `json:"probes"`
}

// Lookup returns the probe with the given name.
func (r *Report) Lookup(name string) Probe {
	for _, p := range r.Probes {
		if p.Name == name {
			return p
		}
	}
	return Probe{Name: name, Reason: "not probed"}
}

// probes are every probe, in report order.
var probes = []struct {
	name string
	run  func() error
}{
	{BTF, func() error { _, err := btf.LoadKernelSpec(); return err }},
	{TPBTF, func() error { return probeTracing(ebpf.AttachTraceRawTp, "inet_sock_set_state") }},
	{Fentry, func() error { return probeTracing(ebpf.AttachTraceFEntry, probeFunction) }},
	{Fexit, func() error { return probeTracing(ebpf.AttachTraceFExit, probeFunction) }},
	{RawTP, probeRawTracepoint},
	{Netfilter, probeNetfilter},
	{Kprobe, probeKprobe},
	{IterTCP, probeIter},
	{CgroupSKB, func() error { return features.HaveProgramType(ebpf.CGroupSKB) }},
	{RingBuf, func() error { return features.HaveMapType(ebpf.RingBuf) }},
	{SkStorage, func() error { return features.HaveMapType(ebpf.SkStorage) }},
	{SkStorageBTF, probeSkStorageTracing},
	{KtimeTAI, func() error { return features.HaveProgramHelper(ebpf.Kprobe, asm.FnKtimeGetTaiNs) }},
	{StatsEnabled, statsEnabled},
}

var (
	once    sync.Once
	cached  *Report
	checked sync.Map // probe name -> Probe
)

// Detect runs every probe once per process and returns the shared report.
func Detect() *Report {
	once.Do(func() {
		r := &Report{Kernel: KernelRelease()}
		for _, p := range probes {
			r.Probes = append(r.Probes, Check(p.name))
		}
		cached = r
	})
	return cached
}

// Check runs one probe, once per process: for callers that need one answer
// without paying for every probe (slow on emulated machines).
func Check(name string) Probe {
	if p, ok := checked.Load(name); ok {
		return p.(Probe)
	}
	for _, probe := range probes {
		if probe.name == name {
			p := Probe{Name: name, OK: true}
			if err := probe.run(); err != nil {
				p.OK, p.Reason = false, explain(err)
			}
			checked.Store(name, p)
			return p
		}
	}
	return Probe{Name: name, Reason: "not probed"}
}

// returnZero is the smallest valid program body.
var returnZero = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}

func load(spec *ebpf.ProgramSpec) (*ebpf.Program, error) {
	spec.License = "GPL"
	if spec.Instructions == nil {
		spec.Instructions = returnZero
	}
	return ebpf.NewProgramWithOptions(spec, ebpf.ProgramOptions{LogDisabled: true})
}

func probeTracing(at ebpf.AttachType, target string) error {
	prog, err := load(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: at, AttachTo: target})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer prog.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: at})
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	return l.Close()
}

func probeRawTracepoint() error {
	prog, err := load(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer prog.Close()
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "inet_sock_set_state", Program: prog})
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	return l.Close()
}

func probeNetfilter() error {
	prog, err := load(&ebpf.ProgramSpec{Type: ebpf.Netfilter, AttachType: ebpf.AttachNetfilter,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}}) // NF_ACCEPT
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer prog.Close()
	l, err := link.AttachNetfilter(link.NetfilterOptions{Program: prog,
		ProtocolFamily: link.NetfilterProtoIPv4, Hook: link.NetfilterInetLocalIn, Priority: 1})
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	return l.Close()
}

// probeSkStorageTracing loads a tp_btf program that calls bpf_sk_storage_get
// on the socket of inet_sock_set_state: kernels before 5.11 do not offer the
// helper to tracing programs.
func probeSkStorageTracing() error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.SkStorage, KeySize: 4, ValueSize: 4,
		Flags: unix.BPF_F_NO_PREALLOC, Key: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed},
		Value: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}})
	if err != nil {
		return fmt.Errorf("sk_storage map: %w", err)
	}
	defer m.Close()
	prog, err := load(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp,
		AttachTo: "inet_sock_set_state", Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 0, asm.DWord), // the tracepoint's sock
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Imm(asm.R3, 0),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnSkStorageGet.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		}})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return prog.Close()
}

func probeKprobe() error {
	if _, err := os.Stat("/sys/bus/event_source/devices/kprobe"); err != nil {
		return errors.New("kernel built without CONFIG_KPROBES (no kprobe PMU)")
	}
	prog, err := load(&ebpf.ProgramSpec{Type: ebpf.Kprobe})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer prog.Close()
	l, err := link.Kprobe(probeFunction, prog, nil)
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	return l.Close()
}

func probeIter() error {
	prog, err := load(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceIter, AttachTo: "tcp"})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer prog.Close()
	it, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	defer it.Close()
	f, err := it.Open() // some kernels accept the link but refuse to run it
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	return f.Close()
}

func statsEnabled() error {
	b, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(b)) != "1" {
		return errors.New("kernel.bpf_stats_enabled=0 (sysctl -w kernel.bpf_stats_enabled=1 to get per-program run time)")
	}
	return nil
}

// errENOTSUPP is the kernel-internal ENOTSUPP (524) that BPF syscalls leak.
const errENOTSUPP = unix.Errno(524)

// memlockLifted is set once RemoveMemlock succeeded.
var memlockLifted atomic.Bool

// RemoveMemlock lifts RLIMIT_MEMLOCK, which kernels before 5.11 charge BPF
// maps and programs to (a no-op on later kernels). Call it before loading.
func RemoveMemlock() error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("raising RLIMIT_MEMLOCK: %w", err)
	}
	memlockLifted.Store(true)
	return nil
}

// memlockHint is what cilium/ebpf appends to any EPERM at load time before
// the verifier ran; once the limit is lifted it only misleads.
const memlockHint = " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)"

// explain turns the errno the kernel answered with into something an operator
// can act on; the raw error stays in the text.
func explain(err error) string {
	switch {
	case errors.Is(err, unix.EPERM):
		msg := err.Error()
		if memlockLifted.Load() {
			msg = strings.Replace(msg, memlockHint, "", 1)
		}
		return msg + " (refused by the kernel: lockdown, LSM policy or missing capability)"
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.EINVAL), errors.Is(err, errENOTSUPP),
		errors.Is(err, unix.EOPNOTSUPP):
		return err.Error() + " (not supported by this kernel)"
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ESRCH):
		return err.Error() + " (attach target not found in kernel BTF)"
	default:
		return err.Error()
	}
}

// KernelRelease is the running kernel's release (uname -r), without probing anything.
func KernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// SocketCookieTracing reports whether tracing programs may call
// bpf_get_socket_cookie (5.12+), by loading the smallest one that does.
// Both BPF objects key sockets by cookie, and read the socket's cookie
// field where the helper is refused. Not in `doctor`'s list: its answer
// shows as the kernel version's.
var SocketCookieTracing = sync.OnceValue(func() bool {
	prog, err := load(&ebpf.ProgramSpec{
		Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: "inet_sock_set_state",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R1, asm.R1, 0, asm.DWord), // the struct sock * argument
			asm.FnGetSocketCookie.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		return false
	}
	prog.Close()
	return true
})
