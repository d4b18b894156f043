// Package kubernetes names the pod and container a cgroup belongs to without
// the API server: the pod UID and container ID come from the cgroup path the
// kubelet and the container runtime chose, the names from the kubelet's log
// directory, which every node has.
package kubernetes

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Names are a container's Kubernetes names.
type Names struct {
	Namespace, Pod, Container string
}

// The cgroup layouts of pods, by cgroup driver:
//
//	systemd:  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, _ for ->.slice/<runtime>-<id>.scope
//	cgroupfs: /kubepods/burstable/pod<uid>/<id>
//
// Guaranteed pods sit directly below kubepods; <runtime> is cri-containerd,
// crio or docker. Nested kubelets (kind, k3s in a unit) put the same below
// a prefix: /kubelet.slice/kubelet-kubepods.slice/….
var (
	podSegment       = regexp.MustCompile(`^(?:[a-z-]*-)?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$`)
	containerSegment = regexp.MustCompile(`^(?:(?:cri-containerd|crio|docker)-)?([0-9a-f]{64})(?:\.scope)?$`)
)

// ParseCgroup returns the pod UID (with dashes) and container ID of a cgroup
// path relative to the v2 root, or ok false for a cgroup outside any pod. A
// pod's own cgroup, or one of the runtime's below it (CRI-O's conmon), has
// an empty container ID.
func ParseCgroup(path string) (podUID, containerID string, ok bool) {
	inKubepods := false
	segments := strings.Split(strings.Trim(path, "/"), "/")
	for i, seg := range segments {
		if !inKubepods {
			inKubepods = strings.Contains(seg, "kubepods")
			continue
		}
		m := podSegment.FindStringSubmatch(seg)
		if m == nil {
			continue
		}
		podUID = strings.ReplaceAll(m[1], "_", "-")
		if i+1 < len(segments) {
			if c := containerSegment.FindStringSubmatch(segments[i+1]); c != nil {
				containerID = c[1]
			}
		}
		return podUID, containerID, true
	}
	return "", "", false
}

// The kubelet's log layout under its log directory (/var/log):
//
//	pods/<namespace>_<pod>_<uid>/<container>/<restart>.log
//	containers/<pod>_<namespace>_<container>-<container id>.log
var containerLog = regexp.MustCompile(`^([^_]+)_([^_]+)_([^_]+)-([0-9a-f]{64})\.log$`)

// rescanEvery bounds how often an unknown pod or container makes the Namer
// read the log directories again.
const rescanEvery = 10 * time.Second

// Namer names cgroups from the kubelet's log directory.
type Namer struct {
	dir string

	mu         sync.Mutex
	pods       map[string]Names // by pod UID; Container empty
	containers map[string]Names // by container ID
	scanned    time.Time
}

// NewNamer returns a Namer reading the log directory dir (the kubelet's
// default is /var/log). A directory without pods/ names nothing.
func NewNamer(dir string) *Namer {
	return &Namer{dir: dir, pods: map[string]Names{}, containers: map[string]Names{}}
}

// Lookup returns the names of the pod and container whose cgroup is path,
// or ok false for a cgroup that is not a pod's or a pod the log directory
// does not know. A container the directory does not know gets the pod's
// names with an empty container.
func (n *Namer) Lookup(path string) (names Names, ok bool) {
	uid, id, ok := ParseCgroup(path)
	if !ok {
		return Names{}, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	names, complete := n.known(uid, id)
	if !complete && time.Since(n.scanned) >= rescanEvery {
		n.scan()
		names, _ = n.known(uid, id)
	}
	return names, names.Pod != ""
}

// known returns what the last scan knows of the pod and container, and
// whether that is all there is to know.
func (n *Namer) known(uid, id string) (Names, bool) {
	if c, ok := n.containers[id]; ok && id != "" {
		return c, true
	}
	p := n.pods[uid]
	return p, p.Pod != "" && id == ""
}

// scan reads both log directories afresh (pods that are gone are
// forgotten); entries it cannot parse are skipped.
func (n *Namer) scan() {
	n.scanned = time.Now()
	n.pods, n.containers = map[string]Names{}, map[string]Names{}
	pods, _ := os.ReadDir(filepath.Join(n.dir, "pods"))
	for _, p := range pods {
		parts := strings.Split(p.Name(), "_")
		if len(parts) != 3 || !p.IsDir() {
			continue
		}
		n.pods[parts[2]] = Names{Namespace: parts[0], Pod: parts[1]}
	}
	containers, _ := os.ReadDir(filepath.Join(n.dir, "containers"))
	for _, c := range containers {
		if m := containerLog.FindStringSubmatch(c.Name()); m != nil {
			n.containers[m[4]] = Names{Namespace: m[2], Pod: m[1], Container: m[3]}
		}
	}
}
