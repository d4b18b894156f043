// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/clierr"
)

// fakeKubelet lays out a log directory as the kubelet does: the pod's
// directory pods/<namespace>_<pod>_<uid>/<container>/0.log and the symlink
// containers/<pod>_<namespace>_<container>-<id>.log pointing at it.
type fakeKubelet struct {
	t   testing.TB
	dir string
}

func (k fakeKubelet) addPod(namespace, pod, uid string) {
	k.t.Helper()
	if err := os.MkdirAll(filepath.Join(k.dir, "pods", namespace+"_"+pod+"_"+uid), 0o755); err != nil {
		k.t.Fatal(err)
	}
}

func (k fakeKubelet) addContainer(namespace, pod, uid, container, id string) {
	k.t.Helper()
	logs := filepath.Join(k.dir, "pods", namespace+"_"+pod+"_"+uid, container)
	if err := os.MkdirAll(logs, 0o755); err != nil {
		k.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logs, "0.log"), nil, 0o644); err != nil {
		k.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(k.dir, "containers"), 0o755); err != nil {
		k.t.Fatal(err)
	}
	link := filepath.Join(k.dir, "containers", pod+"_"+namespace+"_"+container+"-"+id+".log")
	if err := os.Symlink(filepath.Join(logs, "0.log"), link); err != nil {
		k.t.Fatal(err)
	}
}

const (
	webUID = "2fc932ce-fdcc-454b-97bd-aadfdeb4c340"
	webID  = "aaefb9d8feed2d453b543f6d928cede7a4dbefa6a0ae7c9b990dd234c56e93b9"
	// The pod's sandbox (pause) container: it has no log.
	pauseID = "79fedb3bd23ca77c9d9ccb41909038316f713df22b54b7d942b71d3812e7c74e"
)

func podSlice(uid string) string {
	return "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidEscaped(uid) + ".slice"
}

// uidEscaped is the UID as the kubelet's systemd driver writes it.
func uidEscaped(uid string) string { return strings.ReplaceAll(uid, "-", "_") }

func TestResolverNamesFromTheLogLayout(t *testing.T) {
	k := fakeKubelet{t, t.TempDir()}
	// Dots and dashes as real names have them (a Deployment's pod).
	k.addContainer("shop-prod", "web-7c5f9d8b4-x2x9q", webUID, "nginx-proxy", webID)
	r := NewResolver(k.dir)
	want := Names{Namespace: "shop-prod", Pod: "web-7c5f9d8b4-x2x9q", Container: "nginx-proxy"}
	if got := r.Names(podSlice(webUID) + "/cri-containerd-" + webID + ".scope"); got != want {
		t.Errorf("container: %+v, want %+v", got, want)
	}
	pod := Names{Namespace: "shop-prod", Pod: "web-7c5f9d8b4-x2x9q"}
	for _, cg := range []string{podSlice(webUID), podSlice(webUID) + "/cri-containerd-" + pauseID + ".scope"} {
		if got := r.Names(cg); got != pod {
			t.Errorf("%s: %+v, want %+v", cg, got, pod)
		}
	}
	for _, cg := range []string{"/system.slice/sshd.service", "/"} {
		if got := r.Names(cg); got != (Names{}) {
			t.Errorf("%s: %+v, want none", cg, got)
		}
	}
}

// A pod that starts after the first scan is named once the rate limit
// allows a rescan, and not before; one that goes away is forgotten.
func TestResolverRescansOnAMissAtMostEveryInterval(t *testing.T) {
	k := fakeKubelet{t, t.TempDir()}
	r := NewResolver(k.dir)
	r.rescanEvery = 300 * time.Millisecond
	cg := podSlice(webUID) + "/cri-containerd-" + webID + ".scope"
	if got := r.Names(cg); got != (Names{}) {
		t.Fatalf("before the pod exists: %+v", got)
	}
	k.addContainer("default", "web", webUID, "app", webID)
	if got := r.Names(cg); got != (Names{}) {
		t.Fatalf("rescanned within the interval: %+v", got)
	}
	time.Sleep(r.rescanEvery)
	want := Names{Namespace: "default", Pod: "web", Container: "app"}
	if got := r.Names(cg); got != want {
		t.Fatalf("after the interval: %+v, want %+v", got, want)
	}
	if err := os.RemoveAll(filepath.Join(k.dir, "containers")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(r.rescanEvery)
	other := podSlice("1e597579-417e-482f-bf65-5fe170c3aebd") // a miss triggers the rescan
	if got := r.Names(other); got != (Names{}) {
		t.Fatalf("unknown pod: %+v", got)
	}
	// The pod directory is still there: the container is gone, the pod not.
	if got := r.Names(cg); got != (Names{Namespace: "default", Pod: "web"}) {
		t.Fatalf("after its log link went away: %+v", got)
	}
}

// Only one of the two directories mounted still names what it can.
func TestResolverWithOneDirectory(t *testing.T) {
	k := fakeKubelet{t, t.TempDir()}
	k.addPod("kube-system", "etcd-node1", "8daa50c3a64c9ff60bb9eab7b44b56fd") // a static pod
	r := NewResolver(k.dir)
	want := Names{Namespace: "kube-system", Pod: "etcd-node1"}
	if got := r.Names(podSlice("8daa50c3a64c9ff60bb9eab7b44b56fd") + "/cri-containerd-" + webID + ".scope"); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
	var none *Resolver
	if got := none.Names(podSlice(webUID)); got != (Names{}) {
		t.Errorf("nil resolver: %+v", got)
	}
}

func TestParseLogNames(t *testing.T) {
	id, n, ok := parseContainerLog("coredns-5d78c9869d-8xkqf_kube-system_coredns-" + webID + ".log")
	if !ok || id != webID || n != (Names{"kube-system", "coredns-5d78c9869d-8xkqf", "coredns"}) {
		t.Errorf("containers/: %q %+v %v", id, n, ok)
	}
	// Should a pod name ever hold "_", it is still the pod's: the
	// namespace and container name cannot.
	if _, n, ok := parseContainerLog("odd_pod_ns_c-" + webID + ".log"); !ok || n != (Names{"ns", "odd_pod", "c"}) {
		t.Errorf("pod with _: %+v %v", n, ok)
	}
	if uid, n, ok := parsePodDir("ns_odd_pod_" + webUID); !ok || uid != webUID || n != (Names{Namespace: "ns", Pod: "odd_pod"}) {
		t.Errorf("pods/ with _: %q %+v %v", uid, n, ok)
	}
	for _, bad := range []string{"x.log", "a_b-" + webID + ".log", "_ns_c-" + webID + ".log", "p__c-" + webID + ".log",
		"p_ns_-" + webID + ".log", "p_ns_c-1234.log", "p_ns_c-" + webID + ".log.1",
		"p\x1b[31m_ns_c-" + webID + ".log", "p_n s_c-" + webID + ".log"} {
		if _, _, ok := parseContainerLog(bad); ok {
			t.Errorf("parseContainerLog(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"ns_uid", "_p_uid", "ns__uid", "ns_p_", "nounderscore", "ns_p\x07_" + webUID, "ns_p/_" + webUID} {
		if _, _, ok := parsePodDir(bad); ok {
			t.Errorf("parsePodDir(%q) accepted", bad)
		}
	}
}

func TestOptionsValidateTheDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var usage *clierr.UsageError
	if _, err := (&Options{LogDir: file}).Resolver(); !errors.As(err, &usage) || usage.Flag != "kubernetes-logs" || usage.Value != file {
		t.Errorf("a file: %v", err)
	}
	// No kubelet on this host: not an error, nothing named.
	if r, err := (&Options{LogDir: filepath.Join(dir, "missing")}).Resolver(); err != nil || r == nil {
		t.Errorf("missing directory: %v, %v", r, err)
	}
	if r, err := (&Options{LogDir: ""}).Resolver(); err != nil || r != nil {
		t.Errorf(`"": %v, %v`, r, err)
	}
	if r, err := (&Options{LogDir: dir}).Resolver(); err != nil || r == nil {
		t.Errorf("a directory: %v, %v", r, err)
	}
}

// TestResolverRereadsOnlyChangedDirectories: a rescan reads a directory
// again only when its mtime moved (or it was replaced), so an unlisted pod
// cgroup costs two stats per rescan, not a read of every entry. Proven by
// an entry added behind a restored mtime: not seen until the mtime moves.
func TestResolverRereadsOnlyChangedDirectories(t *testing.T) {
	k := fakeKubelet{t, t.TempDir()}
	k.addPod("default", "web", webUID)
	k.addContainer("default", "web", webUID, "app", webID)
	containers := filepath.Join(k.dir, "containers")
	past := time.Now().Add(-time.Hour) // long before any read: not racy
	setMtime := func(when time.Time) {
		t.Helper()
		if err := os.Chtimes(containers, when, when); err != nil {
			t.Fatal(err)
		}
	}
	setMtime(past)
	r := NewResolver(k.dir)
	r.rescanEvery = 0
	app := podSlice(webUID) + "/cri-containerd-" + webID + ".scope"
	if got := r.Names(app); got.Container != "app" {
		t.Fatalf("first scan: %+v", got)
	}
	const sideID = "0c3fe2a1be9a4b0e8d1f5c6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708"
	k.addContainer("default", "web", webUID, "sidecar", sideID)
	setMtime(past)
	side := podSlice(webUID) + "/cri-containerd-" + sideID + ".scope"
	if got := r.Names(side); got.Container != "" {
		t.Fatalf("read again though its mtime did not move: %+v", got)
	}
	setMtime(time.Now())
	if got := r.Names(side); got.Container != "sidecar" {
		t.Fatalf("not read again after its mtime moved: %+v", got)
	}
}
