// SPDX-License-Identifier: Apache-2.0

package latency

import (
	"errors"
	"fmt"

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

// errNoNetns is returned when -n names an inode no live namespace has.
var errNoNetns = errors.New("no network namespace with this inode")

func netnsPath(inode uint64) (string, error) {
	if p, ok := selector.Namespaces()[inode]; ok {
		return p, nil
	}
	return "", fmt.Errorf("%w: %d", errNoNetns, inode)
}
