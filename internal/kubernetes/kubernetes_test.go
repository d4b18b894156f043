package kubernetes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	uid = "5a3c2f8e-1b2d-4c6e-8f0a-1b2c3d4e5f60"
	id  = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
)

// Cgroup paths as each driver and runtime lays them out (from nodes running
// each: systemd driver with containerd, CRI-O and cri-dockerd; cgroupfs with
// containerd and Docker; kind's nested kubelet).
func TestParseCgroup(t *testing.T) {
	us := strings.ReplaceAll(uid, "-", "_")
	cases := []struct {
		path          string
		wantUID, want string
		ok            bool
	}{
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/cri-containerd-" + id + ".scope", uid, id, true},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/crio-" + id + ".scope", uid, id, true},
		{"/kubepods.slice/kubepods-pod" + us + ".slice/docker-" + id + ".scope", uid, id, true},
		{"/kubepods/burstable/pod" + uid + "/" + id, uid, id, true},
		{"/kubepods/pod" + uid + "/" + id, uid, id, true},
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + us + ".slice/cri-containerd-" + id + ".scope", uid, id, true},
		// The pod's own cgroup, and CRI-O's monitor below it: the pod only.
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice", uid, "", true},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/crio-conmon-" + id + ".scope", uid, "", true},
		// Not a pod's.
		{"/kubepods.slice", "", "", false},
		{"/kubepods.slice/kubepods-burstable.slice", "", "", false},
		{"/system.slice/containerd.service", "", "", false},
		{"/system.slice/docker-" + id + ".scope", "", "", false},
		{"/user.slice/pod" + uid, "", "", false},
		{"/", "", "", false},
	}
	for _, c := range cases {
		gotUID, got, ok := ParseCgroup(c.path)
		if gotUID != c.wantUID || got != c.want || ok != c.ok {
			t.Errorf("ParseCgroup(%s) = %q, %q, %v; want %q, %q, %v", c.path, gotUID, got, ok, c.wantUID, c.want, c.ok)
		}
	}
}

// logDir makes a kubelet log directory holding one pod with one container.
func logDir(t *testing.T, namespace, pod, podUID, container, containerID string) string {
	t.Helper()
	dir := t.TempDir()
	podDir := filepath.Join(dir, "pods", namespace+"_"+pod+"_"+podUID, container)
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(podDir, "0.log")
	if err := os.WriteFile(logFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "containers"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "containers", pod+"_"+namespace+"_"+container+"-"+containerID+".log")
	if err := os.Symlink(logFile, link); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestNamerFromKubeletLogs(t *testing.T) {
	n := NewNamer(logDir(t, "shop", "cart-7d9f8b6c5-x2x4q", uid, "redis", id))
	us := strings.ReplaceAll(uid, "-", "_")
	cases := []struct {
		path string
		want Names
		ok   bool
	}{
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/cri-containerd-" + id + ".scope",
			Names{"shop", "cart-7d9f8b6c5-x2x4q", "redis"}, true},
		{"/kubepods/burstable/pod" + uid + "/" + id, Names{"shop", "cart-7d9f8b6c5-x2x4q", "redis"}, true},
		// The pause container's ID is in no log: the pod's names.
		{"/kubepods/burstable/pod" + uid + "/" + strings.Repeat("ab", 32), Names{"shop", "cart-7d9f8b6c5-x2x4q", ""}, true},
		{"/kubepods/burstable/pod" + uid, Names{"shop", "cart-7d9f8b6c5-x2x4q", ""}, true},
		{"/kubepods/burstable/pod00000000-0000-0000-0000-000000000000/" + id, Names{"shop", "cart-7d9f8b6c5-x2x4q", "redis"}, true},
		{"/kubepods/burstable/pod00000000-0000-0000-0000-000000000000", Names{}, false},
		{"/system.slice/nginx.service", Names{}, false},
	}
	for _, c := range cases {
		if got, ok := n.Lookup(c.path); got != c.want || ok != c.ok {
			t.Errorf("Lookup(%s) = %+v, %v; want %+v, %v", c.path, got, ok, c.want, c.ok)
		}
	}
	if got, ok := NewNamer(t.TempDir()).Lookup("/kubepods/pod" + uid + "/" + id); ok {
		t.Errorf("empty log directory named %+v", got)
	}
}
