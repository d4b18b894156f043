// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
	byCgroup   map[string]Names // cgroup paths answered completely, until a directory changes
	// When pods/ and containers/ were last read: a scan reads again only a
	// directory that changed since, so an unlisted pod cgroup costs two
	// stat(2) per scan, not a read of every pod's and container's entry.
	podsRead, containersRead listing
}

// listing is what a directory looked like when it was last read.
type listing struct {
	mtime, readAt time.Time
	ino           uint64
}

// racyWindow is how long before a read a directory's mtime must be for the
// read to be trusted while the mtime stays: an entry added in the same
// clock tick as the read (or within a coarse file system's mtime
// granularity) leaves the mtime as the read saw it.
const racyWindow = 2 * time.Second

// changed reports whether path may list other entries than at last, and
// then records it as read now.
func (l *listing) changed(path string) bool {
	now := time.Now()
	st, err := os.Stat(path)
	if err != nil {
		*l = listing{readAt: now} // gone or unreadable: read (nothing) again next time
		return true
	}
	var ino uint64
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	if ino == l.ino && st.ModTime().Equal(l.mtime) && l.mtime.Before(l.readAt.Add(-racyWindow)) {
		return false
	}
	*l = listing{mtime: st.ModTime(), readAt: now, ino: ino}
	return true
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

// scan reads again those of pods/ and containers/ that changed since they
// were last read; either may be missing (a DaemonSet that mounts only one,
// or no kubelet at all).
func (r *Resolver) scan() {
	r.scanned = time.Now()
	pods, containers := filepath.Join(r.dir, "pods"), filepath.Join(r.dir, "containers")
	if r.podsRead.changed(pods) {
		r.pods = readNames(pods, parsePodDir)
		clear(r.byCgroup) // answers of pods that went away go with them
	}
	if r.containersRead.changed(containers) {
		r.containers = readNames(containers, parseContainerLog)
		clear(r.byCgroup)
	}
}

// readNames parses every entry name of dir that parse accepts, by key.
func readNames(dir string, parse func(string) (string, Names, bool)) map[string]Names {
	out := map[string]Names{}
	entries, _ := os.ReadDir(dir) // none when missing
	for _, e := range entries {
		if key, n, ok := parse(e.Name()); ok {
			out[key] = n
		}
	}
	return out
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
