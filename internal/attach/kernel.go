// SPDX-License-Identifier: Apache-2.0

package attach

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// kernelBTF is the kernel's BTF, decoded once per process: without a shared
// cache every program load decodes (copies) all of vmlinux's types again,
// which dominated start-up on emulated guests.
var kernelBTF = btf.NewCache()

// KernelTypes is the running kernel's BTF, from the process-wide cache that
// program loads use too. Do not modify it.
func KernelTypes() (*btf.Spec, error) {
	spec, err := kernelBTF.Kernel()
	if err != nil {
		return nil, fmt.Errorf("kernel BTF: %w", err)
	}
	return spec, nil
}

// TracepointArgs is a Gate: the raw tracepoint tp must have at least n
// arguments here (since says from which kernel on it has).
func TracepointArgs(tp string, n int, since string) Gate {
	return func() error {
		have, err := tracepointArgs(tp)
		if err != nil {
			return err
		}
		if have < n {
			return fmt.Errorf("tracepoint %s has %d arguments here, %d since %s", tp, have, n, since)
		}
		return nil
	}
}

// tracepointArgs is the number of arguments of a raw tracepoint, from the
// kernel's BTF (btf_trace_<name>: a pointer to a function whose first
// parameter is the context, not an argument).
func tracepointArgs(tp string) (int, error) {
	spec, err := KernelTypes()
	if err != nil {
		return 0, err
	}
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+tp, &td); err != nil {
		return 0, fmt.Errorf("tracepoint %s in kernel BTF: %w", tp, err)
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return 0, fmt.Errorf("btf_trace_%s is not a function pointer", tp)
	}
	proto, ok := ptr.Target.(*btf.FuncProto)
	if !ok || len(proto.Params) == 0 {
		return 0, fmt.Errorf("btf_trace_%s is not a function pointer", tp)
	}
	return len(proto.Params) - 1, nil
}

const tracefs = "/sys/kernel/tracing"

// mountTracefs makes the classic tracepoints' ids readable: tracefs is
// mounted where it is not yet.
func mountTracefs() error {
	_, err := os.Stat(tracefs + "/events")
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("tracefs: %w (only root may read it)", err)
	}
	if err := unix.Mount("nodev", tracefs, "tracefs", 0, ""); err != nil {
		return fmt.Errorf("mounting tracefs on %s: %w", tracefs, err)
	}
	return nil
}
