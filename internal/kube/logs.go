// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/clierr"
)

// DefaultLogDir is where the kubelet keeps pods/ and containers/.
const DefaultLogDir = "/var/log"

// rescanEvery is the least time between two reads of the log directory: an
// unknown pod (or a cgroup that only looks like one) must not turn every
// refresh into a directory scan.
const rescanEvery = 2 * time.Second

// Options is the --kubernetes-logs flag.
type Options struct {
	LogDir string
}

// Register adds --kubernetes-logs to fs.
func (o *Options) Register(fs *pflag.FlagSet) {
	fs.StringVar(&o.LogDir, "kubernetes-logs", DefaultLogDir,
		"name the namespace, pod and container of processes in pod cgroups from the kubelet's log directory `DIR` (holding pods/ and containers/; \"\" names none)")
}

// Resolver validates the flag (exit 2 naming it and its value) and returns
// the resolver it asks for, nil for "". A directory that does not exist is
// not an error: the host runs no kubelet, and nothing is named.
func (o *Options) Resolver() (*Resolver, error) {
	if o.LogDir == "" {
		return nil, nil
	}
	st, err := os.Stat(o.LogDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, clierr.Usage("kubernetes-logs", o.LogDir, "%v", err)
	case !st.IsDir():
		return nil, clierr.Usage("kubernetes-logs", o.LogDir, "not a directory")
	}
	return NewResolver(o.LogDir), nil
}

// Resolver names the pods of cgroups from the kubelet's log directory. It
// caches what it read and reads the directory again, at most every
// rescanEvery, when a pod cgroup is not known yet.
type Resolver struct {
	dir         string
	rescanEvery time.Duration

	mu         sync.Mutex
	scanned    time.Time
	containers map[string]Names // by container ID, from containers/
	pods       map[string]Names // by pod UID, from pods/ (no container)
	byCgroup   map[string]Names // cgroup paths answered completely, until the next scan
}

// NewResolver returns a Resolver reading dir (e.g. /var/log).
func NewResolver(dir string) *Resolver {
	return &Resolver{dir: dir, rescanEvery: rescanEvery, byCgroup: map[string]Names{}}
}

// Names returns the names of the pod container that the cgroup path
// belongs to; zero for a cgroup outside pods, for a nil Resolver, and for a
// pod that the log directory does not list.
func (r *Resolver) Names(cgroup string) Names {
	// Every pod path holds "kubepods" (ParseCgroup needs it): the host's
	// other cgroups, most of them on most hosts, skip the lock and the map.
	if r == nil || !strings.Contains(cgroup, "kubepods") {
		return Names{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.byCgroup[cgroup]; ok {
		return n
	}
	ref, ok := ParseCgroup(cgroup)
	if !ok {
		r.byCgroup[cgroup] = Names{} // a look-alike: parsed once
		return Names{}
	}
	n, complete := r.lookup(ref)
	if !complete && time.Since(r.scanned) >= r.rescanEvery {
		r.scan()
		n, complete = r.lookup(ref)
	}
	if complete {
		r.byCgroup[cgroup] = n
	}
	return n
}

// lookup names ref from what the last scan read; complete says that a
// rescan cannot tell more.
func (r *Resolver) lookup(ref Ref) (n Names, complete bool) {
	if n, ok := r.containers[ref.ContainerID]; ok && ref.ContainerID != "" {
		return n, true
	}
	n, ok := r.pods[ref.PodUID]
	return n, ok && ref.ContainerID == ""
}

// scan reads pods/ and containers/ afresh; either may be missing (a
// DaemonSet that mounts only one, or no kubelet at all).
func (r *Resolver) scan() {
	r.scanned = time.Now()
	clear(r.byCgroup) // answers of pods that went away go with them
	r.pods = map[string]Names{}
	if entries, err := os.ReadDir(filepath.Join(r.dir, "pods")); err == nil {
		for _, e := range entries {
			if uid, n, ok := parsePodDir(e.Name()); ok {
				r.pods[uid] = n
			}
		}
	}
	r.containers = map[string]Names{}
	if entries, err := os.ReadDir(filepath.Join(r.dir, "containers")); err == nil {
		for _, e := range entries {
			if id, n, ok := parseContainerLog(e.Name()); ok {
				r.containers[id] = n
			}
		}
	}
}

// parsePodDir parses "<namespace>_<pod>_<uid>", the name of a pod's
// directory under pods/. Neither the namespace nor the UID holds "_".
func parsePodDir(name string) (uid string, n Names, ok bool) {
	first, last := strings.IndexByte(name, '_'), strings.LastIndexByte(name, '_')
	if first <= 0 || last <= first+1 || last == len(name)-1 || !validNames(name) {
		return "", Names{}, false
	}
	return name[last+1:], Names{Namespace: name[:first], Pod: name[first+1 : last]}, true
}

// parseContainerLog parses "<pod>_<namespace>_<container>-<id>.log", the
// name of a container's log symlink under containers/. Neither the
// namespace nor the container name holds "_", and the ID is 64 hex digits.
func parseContainerLog(name string) (id string, n Names, ok bool) {
	base, ok := strings.CutSuffix(name, ".log")
	dash := strings.LastIndexByte(base, '-')
	if !ok || dash < 0 || !isContainerID(base[dash+1:]) {
		return "", Names{}, false
	}
	rest := base[:dash]
	c := strings.LastIndexByte(rest, '_')
	if c <= 0 || c == len(rest)-1 {
		return "", Names{}, false
	}
	ns := strings.LastIndexByte(rest[:c], '_')
	if ns <= 0 || ns == c-1 || !validNames(rest) {
		return "", Names{}, false
	}
	return base[dash+1:], Names{Namespace: rest[ns+1 : c], Pod: rest[:ns], Container: rest[c+1:]}, true
}

// validNames accepts what Kubernetes names are made of (DNS-1123: lowercase
// letters, digits, "-" and "."), the "_" that separates them, and uppercase
// letters in static pods' UIDs. Anything else is not the kubelet's, and could
// reach a terminal: such an entry is ignored.
func validNames(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}
