package latency

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/selector"
)

// ownNetns returns the inode of the namespace we run in.
func ownNetns() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("own network namespace: %w", err)
	}
	return st.Ino, nil
}

// inNetns runs fn on an OS thread switched into the namespace at path and
// back. (A thread left locked is not always discarded: Go keeps the main
// thread, and /proc/self/ns/net follows the main thread.)
// The open handle is returned so the caller can keep the namespace alive for
// as long as objects created in it (netfilter links) exist.
func inNetns(path string, fn func() error) (netns.NsHandle, error) {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return netns.None(), err
	}
	self, err := netns.Get()
	if err != nil {
		target.Close()
		return netns.None(), err
	}
	defer self.Close()
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		err := fn()
		if restoreErr := netns.Set(self); restoreErr != nil {
			// Stay locked: the thread ends with this goroutine instead
			// of running others in the wrong namespace.
			done <- errors.Join(err, restoreErr)
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	if err := <-done; err != nil {
		target.Close()
		return netns.None(), err
	}
	return target, nil
}

// errNoNetns is returned when -n names an inode no live namespace has.
var errNoNetns = errors.New("no network namespace with this inode")

func netnsPath(inode uint64) (string, error) {
	if p, ok := selector.Namespaces()[inode]; ok {
		return p, nil
	}
	return "", fmt.Errorf("%w: %d", errNoNetns, inode)
}
