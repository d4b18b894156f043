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

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
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

var (
	once   sync.Once
	cached *Report
)

// Detect runs every probe once per process and returns the shared report.
func Detect() *Report {
	once.Do(func() { cached = detect() })
	return cached
}

func detect() *Report {
	r := &Report{Kernel: KernelRelease()}
	add := func(name string, err error) {
		p := Probe{Name: name, OK: err == nil}
		if err != nil {
			p.Reason = explain(err)
		}
		r.Probes = append(r.Probes, p)
	}
	_, err := btf.LoadKernelSpec()
	add(BTF, err)
	add(TPBTF, probeTracing(ebpf.AttachTraceRawTp, "inet_sock_set_state"))
	add(Fentry, probeTracing(ebpf.AttachTraceFEntry, probeFunction))
	add(Fexit, probeTracing(ebpf.AttachTraceFExit, probeFunction))
	add(RawTP, probeRawTracepoint())
	add(Netfilter, probeNetfilter())
	add(Kprobe, probeKprobe())
	add(IterTCP, probeIter())
	add(CgroupSKB, features.HaveProgramType(ebpf.CGroupSKB))
	add(RingBuf, features.HaveMapType(ebpf.RingBuf))
	add(SkStorage, features.HaveMapType(ebpf.SkStorage))
	add(KtimeTAI, features.HaveProgramHelper(ebpf.Kprobe, asm.FnKtimeGetTaiNs))
	add(StatsEnabled, statsEnabled())
	return r
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

// explain turns the errno the kernel answered with into something an operator
// can act on; the raw error stays in the text.
func explain(err error) string {
	switch {
	case errors.Is(err, unix.EPERM):
		return err.Error() + " (refused by the kernel: lockdown, LSM policy or missing capability)"
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
