// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OnNamedThread runs fn on an OS thread of its own whose name (the comm the
// kernel reports for the socket calls it makes) is comm, at most 15 bytes.
// The thread is never unlocked, so it exits with fn and its name does not
// leak to other goroutines. Nor is it ever the main thread, whose name is
// the process's: renamed, every later test would see the process under it
// (accepted sockets are named by their process). fn may fail the test with
// t.Fatal: its goroutine then ends early and OnNamedThread reports that.
func OnNamedThread(comm string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		err := errors.New("aborted by a test failure")
		defer func() { done <- err }()
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Held locked meanwhile, the main thread cannot be the
			// one fn runs on.
			err = OnNamedThread(comm, fn)
			runtime.UnlockOSThread()
			return
		}
		var name []byte
		if name, err = unix.ByteSliceFromString(comm); err != nil {
			return
		}
		if err = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
			return
		}
		err = fn()
	}()
	return <-done
}

// DialNamed makes n TCP connections to addr one after another, each from a
// thread named prefix followed by its number (five digits) and used for it
// alone, writing payload bytes and closing: connections that stacktop must
// tell apart by their owner's name.
func DialNamed(addr, prefix string, n, payload int) error {
	for i := range n {
		err := OnNamedThread(fmt.Sprintf("%s%05d", prefix, i), func() error {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			_, err = c.Write(make([]byte, payload))
			c.Close()
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}
