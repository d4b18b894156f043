// SPDX-License-Identifier: Apache-2.0

// Package kube names the Kubernetes namespace, pod and container that a
// cgroup belongs to, without the API server: the pod UID and container ID
// come from the cgroup path that the kubelet and the container runtime
// create, and the names from the directories and symlinks that the kubelet
// keeps under its log directory (/var/log/pods and /var/log/containers).
//
// What the parsing relies on (Kubernetes validation, not convention):
// namespaces and container names are DNS-1123 labels, pod UIDs are UUIDs
// (or, for static pods, a hex digest) and container IDs hex digits, so none
// of them holds "_". Pod
// names are DNS-1123 subdomains, which hold no "_" either, but nothing here
// depends on that: a pod name is whatever lies between the separators of the
// other three.
package kube

import (
	"strings"
)

// Names identifies a Kubernetes container; all three are empty for a
// process outside any pod, and Container is empty for a process of the pod
// whose container is unknown (the sandbox, or a container without logs).
type Names struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
}

// Ref is what a cgroup path tells about a pod: its UID, and the ID of the
// container when the path is a container's.
type Ref struct {
	PodUID      string
	ContainerID string
}

// ParseCgroup finds the pod cgroup in path (a cgroup v2 path, or a cgroup
// v1 path of any controller, relative to the hierarchy or absolute) and the
// container cgroup below it. It knows the kubelet's two cgroup drivers:
//
//	systemd:  .../kubepods[-QOS]-pod<uid, "-" as "_">.slice/<runtime>-<id>.scope
//	cgroupfs: .../kubepods[/QOS]/pod<uid>/[crio-]<id>
//
// with the runtimes containerd (cri-containerd-), CRI-O (crio-) and Docker
// (docker-), and containerd's "<pod slice>:cri-containerd:<id>" form when
// only the kubelet uses systemd. Cgroups nested below a container's belong
// to that container.
func ParseCgroup(path string) (Ref, bool) {
	parts := strings.Split(path, "/")
	inKubepods := false
	for i, part := range parts {
		slice, rest, colon := strings.Cut(part, ":")
		if uid, ok := podUID(slice, inKubepods); ok {
			ref := Ref{PodUID: uid}
			switch {
			case colon:
				ref.ContainerID = containerID(strings.ReplaceAll(rest, ":", "-"))
			case i+1 < len(parts):
				ref.ContainerID = containerID(parts[i+1])
			}
			return ref, true
		}
		inKubepods = inKubepods || strings.Contains(part, "kubepods")
	}
	return Ref{}, false
}

// podUID returns the pod UID that a path component names, if it names one:
// "kubepods-burstable-pod<uid>.slice" (systemd, where the kubelet escapes the
// UID's dashes as underscores) or "pod<uid>" below a kubepods cgroup.
func podUID(name string, inKubepods bool) (string, bool) {
	if unit, ok := strings.CutSuffix(name, ".slice"); ok {
		i := strings.LastIndexByte(unit, '-')
		if i < 0 || !strings.Contains(unit[:i], "kubepods") {
			return "", false
		}
		uid, ok := strings.CutPrefix(unit[i+1:], "pod")
		uid = strings.ReplaceAll(uid, "_", "-")
		return uid, ok && validUID(uid)
	}
	uid, ok := strings.CutPrefix(name, "pod")
	return uid, ok && inKubepods && validUID(uid)
}

// validUID accepts the UIDs the kubelet uses: UUIDs from the API server, and
// for static pods a hex digest of the manifest (or the manifest's own UID).
func validUID(uid string) bool {
	if uid == "" || len(uid) > 64 {
		return false
	}
	for _, c := range uid {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

// runtimePrefixes precede the container ID in the name of a container's
// cgroup, one per container runtime.
var runtimePrefixes = []string{"cri-containerd-", "crio-", "docker-"}

// containerID returns the container ID that a container cgroup's name
// holds, or "" when the name is not a container's (CRI-O's conmon monitor
// has a scope of its own beside the container's).
func containerID(name string) string {
	name = strings.TrimSuffix(name, ".scope")
	if strings.HasPrefix(name, "crio-conmon-") {
		return ""
	}
	for _, prefix := range runtimePrefixes {
		if id, ok := strings.CutPrefix(name, prefix); ok {
			name = id
			break
		}
	}
	if !isContainerID(name) {
		return ""
	}
	return name
}

// isContainerID accepts the 64 hex digits that containerd, CRI-O and Docker
// all use.
func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
