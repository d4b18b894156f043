// SPDX-License-Identifier: Apache-2.0

package bpffd

import (
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/stacktop/stacktop/internal/testenv"
)

func TestParseFdinfo(t *testing.T) {
	got := parse(strings.NewReader("pos:\t0\nflags:\t02000002\nlink_type:\ttracing\nlink_id:\t7\nprog_tag:\tab\nprog_id:\t42\n"))
	if got != (Object{ProgID: 42, LinkID: 7}) {
		t.Fatalf("link fdinfo: %+v, want prog 42 link 7", got)
	}
	got = parse(strings.NewReader("map_type:\t1\nkey_size:\t4\nmemlock:\t4096\nmap_id:\t9\n"))
	if got != (Object{MapID: 9}) {
		t.Fatalf("map fdinfo: %+v, want map 9", got)
	}
}

// TestHeldFindsOwnObjects loads a map, a program and a link to it and
// expects exactly their ids and kinds among this process's descriptors.
func TestHeldFindsOwnObjects(t *testing.T) {
	testenv.RequireRoot(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "task_rename", Program: prog})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	mapInfo, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	mapID, _ := mapInfo.ID()
	progInfo, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	progID, _ := progInfo.ID()
	linkInfo, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	want := map[Object]bool{
		{FD: m.FD(), Kind: Map, MapID: uint32(mapID)}:                     false,
		{FD: prog.FD(), Kind: Prog, ProgID: uint32(progID)}:               false,
		{Kind: Link, ProgID: uint32(progID), LinkID: uint32(linkInfo.ID)}: false,
	}
	held, err := Held(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range held {
		key := o
		if o.Kind == Link {
			key.FD = 0 // cilium/ebpf does not expose a link's descriptor
		}
		if _, ok := want[key]; ok {
			want[key] = true
		}
	}
	for o, found := range want {
		if !found {
			t.Errorf("%+v not among the held objects %+v", o, held)
		}
	}
}
