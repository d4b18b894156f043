// SPDX-License-Identifier: Apache-2.0

package selector

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/cgroup"
	"github.com/stacktop/stacktop/internal/clierr"
	"github.com/stacktop/stacktop/internal/testenv"
)

func ownInode(t *testing.T) uint64 {
	t.Helper()
	ino, err := inodeOf("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

// One meaning for every spelling of a namespace, and a refusal naming the
// value for anything that is not a live network namespace: these used to
// run silently with 0 connections (/etc/passwd, another type of
// namespace, an unknown inode) or fail with ENOENT (0, -1) in stream.
func TestParseNetns(t *testing.T) {
	testenv.RequireRoot(t)
	own := ownInode(t)
	peer := testenv.NewPeer(t, "stc-sel", 62)
	for v, want := range map[string]Netns{
		"0":                                  {Own: true, Inode: own},
		"-1":                                 {All: true},
		strconv.FormatUint(own, 10):          {Own: true, Inode: own},
		"/proc/self/ns/net":                  {Own: true, Inode: own},
		peer.Name:                            {Inode: peer.Inode()},
		"/run/netns/" + peer.Name:            {Inode: peer.Inode()},
		strconv.FormatUint(peer.Inode(), 10): {Inode: peer.Inode()},
	} {
		if got, err := ParseNetns(v); err != nil || got != want {
			t.Errorf("ParseNetns(%q) = %+v, %v; want %+v", v, got, err, want)
		}
	}
	stale := filepath.Join("/run/netns", "stc-sel-stale")
	if err := os.WriteFile(stale, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(stale)
	plain := filepath.Join(t.TempDir(), "passwd") // a regular file, as /etc/passwd (absent in matrix guests)
	if err := os.WriteFile(plain, []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]string{
		plain:               "not a namespace",
		"/proc/self/ns/mnt": "a namespace, but not a network namespace",
		"12345":             "no network namespace with this inode is alive",
		"-2":                "must be 0 (our own), -1 (all)",
		"":                  "must be 0 (our own), -1 (all)",
		"4294967296":        "must be 0 (our own), -1 (all)",
		"stc-sel-none":      "no such network namespace",
		"stc-sel-stale":     "not a namespace",
		"/proc/self/ns":     "not a namespace",
	} {
		if _, err := ParseNetns(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseNetns(%q) = %v, want an error saying %q", v, err, want)
		}
	}
}

func TestParsePID(t *testing.T) {
	for _, v := range []string{"1", "4194304"} {
		if _, err := ParsePID(v); err != nil {
			t.Errorf("ParsePID(%q) = %v", v, err)
		}
	}
	for _, v := range []string{"0", "-1", "4194305", "999999999", "x", "", "1e3", " 1"} {
		if _, err := ParsePID(v); err == nil {
			t.Errorf("ParsePID(%q) accepted", v)
		}
	}
}

func TestParseCgroupAndInterface(t *testing.T) {
	root, err := cgroup.Root()
	if err != nil {
		t.Skip(err) // no cgroup v2 here: nothing to resolve
	}
	rootID, err := cgroup.ID("/")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"/", root, strconv.FormatUint(rootID, 10)} {
		if c, err := ParseCgroup(v); err != nil || c != (Cgroup{ID: rootID, Path: "/"}) {
			t.Errorf("ParseCgroup(%q) = %+v, %v; want the root", v, c, err)
		}
	}
	for _, v := range []string{"/stc-sel-none", "987654321987", "../..", "/../..", root + "/../..", "/etc", root + "/cgroup.procs"} {
		if _, err := ParseCgroup(v); err == nil {
			t.Errorf("ParseCgroup(%q) accepted", v)
		}
	}
	for _, v := range []string{"lo", "1"} {
		if i, err := ParseInterface(v); err != nil || i != (Interface{Index: 1, Name: "lo"}) {
			t.Errorf("ParseInterface(%q) = %+v, %v; want lo", v, i, err)
		}
	}
	for _, v := range []string{"stc-none0", "0", "999999", "-1"} {
		if _, err := ParseInterface(v); err == nil {
			t.Errorf("ParseInterface(%q) accepted", v)
		}
	}
}

func TestSpecsNameTheFlagAndValue(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-p", "999999999"}, `invalid --pid "999999999": must be a process id from 1 to 4194304`},
		{[]string{"--pid", "12,0"}, `invalid --pid "0"`},
		{[]string{"-p", ""}, `invalid --pid: names nothing`},
		{[]string{"-c", "/stc-none"}, `invalid --cgroup "/stc-none"`},
		{[]string{"-i", "stc-none0"}, `invalid --interface "stc-none0"`},
		{[]string{"-n", "/proc/self/status"}, `invalid --netns "/proc/self/status": not a namespace`},
		{[]string{"-n", ""}, `invalid --netns: must be 0 (our own)`},
	} {
		var s Specs
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		s.Register(fs, Help{}, "-1")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		_, err := s.Parse()
		if clierr.Code(err) != clierr.ExitUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error containing %q", c.args, err, c.want)
		}
	}
	if sel, err := (&Specs{}).Parse(); err != nil || !sel.Netns.All || sel.PIDs != nil {
		t.Errorf("the zero Specs selects %+v, %v; want everything", sel, err)
	}
}

// The parsers of user input never panic and accept only what they can
// stand behind: fuzzed for a few seconds in `go test -fuzz`, the seeds run
// in every `go test`.
func FuzzParsePID(f *testing.F) {
	for _, s := range []string{"1", "4194304", "4194305", "-1", "0x10", "+5", "999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if pid, err := ParsePID(v); err == nil && (pid < 1 || pid > PIDMax) {
			t.Fatalf("ParsePID(%q) = %d", v, pid)
		}
	})
}

func FuzzParseNetns(f *testing.F) {
	for _, s := range []string{"0", "-1", "-2", "1", "4026531840", "/proc/self/ns/net", "/proc/self/ns/mnt", "/etc/passwd", "../../proc/1/ns/net", "x\x00y", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, err := ParseNetns(v)
		if err == nil && n.All == (n.Inode != 0) {
			t.Fatalf("ParseNetns(%q) = %+v: all or one namespace, not both or neither", v, n)
		}
	})
}

func FuzzParseCgroup(f *testing.F) {
	for _, s := range []string{"/", "0", "1", "/sys/fs/cgroup", "../..", "/system.slice", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		c, err := ParseCgroup(v)
		if err != nil {
			return
		}
		root, _ := cgroup.Root()
		id, idErr := cgroup.ID(filepath.Join(root, c.Path))
		if idErr != nil || id != c.ID || !strings.HasPrefix(c.Path, "/") {
			t.Fatalf("ParseCgroup(%q) = %+v, which is not the cgroup %s/%s (%v)", v, c, root, c.Path, idErr)
		}
	})
}

func FuzzParseInterface(f *testing.F) {
	for _, s := range []string{"lo", "1", "0", "-1", "eth0", "2147483648", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if i, err := ParseInterface(v); err == nil && (i.Index <= 0 || i.Name == "") {
			t.Fatalf("ParseInterface(%q) = %+v", v, i)
		}
	})
}
