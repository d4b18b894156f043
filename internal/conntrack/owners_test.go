package conntrack

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/testenv"
)

// TestOwnersUnderChurn: connections made one after another, each by a
// thread renamed for it, while snapshots are taken every 100ms. Each is
// reported closed exactly once, with its thread's name and its bytes, and
// no record of the server's port is ever partial or without an owner.
//
// The 7.2 guest broke this (sessions 15 and 16): a state program preempted
// between putting a new entry into the table and owning it let user space
// read the entry half-built, and conns_owners (which runs while accepted
// sockets wait for their owner) give a connecting socket the name of the
// process rather than of its thread.
func TestOwnersUnderChurn(t *testing.T) {
	const n, payload = 2000, 10
	tr := openTracker(t, Config{})
	l := testenv.ServeLoopbackTCP(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	srv := uint16(l.Addr().(*net.TCPAddr).Port)
	dialed := make(chan error, 1)
	go func() { dialed <- dialRenamed(l.Addr().String(), n, payload) }()
	isClient := func(r *conn.Record) bool { return r.RemotePort == srv && r.Event == conn.Closed }
	isServer := func(r *conn.Record) bool {
		return r.LocalPort == srv && r.State != "LISTEN" && r.Event == conn.Closed
	}
	finished := false
	h := poll(t, tr, func(h *history) bool {
		if !finished {
			select {
			case err := <-dialed:
				if err != nil {
					t.Fatal(err)
				}
				finished = true
			default:
			}
		}
		return finished && len(find(h.seen, isClient)) >= n && len(find(h.seen, isServer)) >= n
	})
	var wrong []string
	for _, r := range h.seen {
		if (r.LocalPort == srv || r.RemotePort == srv) && (r.Partial || r.PID == 0 || r.Comm == "") {
			wrong = append(wrong, fmt.Sprintf("partial or ownerless: %+v", r))
		}
	}
	// By name, which is what is checked: a connection's kernel key is not
	// its cookie everywhere (before 5.12 it may be its address).
	byName := map[string][]conn.Record{}
	for _, r := range find(h.seen, isClient) {
		byName[r.Comm] = append(byName[r.Comm], r)
	}
	for i := range n {
		name := fmt.Sprintf("stc-%05d", i)
		rs := byName[name]
		if len(rs) != 1 || rs[0].BytesOut != payload || rs[0].BytesIn != 0 {
			wrong = append(wrong, fmt.Sprintf("connection %d: want one closed record of %s with bytes in/out 0/%d, got:\n%s",
				i, name, payload, dump(rs)))
		}
		delete(byName, name)
	}
	for name, rs := range byName {
		wrong = append(wrong, fmt.Sprintf("closed client records of %q, which made no connection:\n%s", name, dump(rs)))
	}
	if servers := find(h.seen, isServer); len(servers) != n {
		wrong = append(wrong, fmt.Sprintf("%d server ends closed, want %d", len(servers), n))
	} else if short := find(servers, func(r *conn.Record) bool { return r.BytesIn != payload }); len(short) > 0 {
		wrong = append(wrong, "server ends without their bytes:\n"+dump(short))
	}
	testenv.RequireExact(t, wrong, h.last.Lost)
}

// dialRenamed makes n connections to addr one after another, each from this
// thread renamed stc-NNNNN for it, writing payload bytes and closing. The
// thread gets its name back: it may be the main thread, whose name is the
// process's.
func dialRenamed(addr string, n, payload int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var own [16]byte
	if err := unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&own[0])), 0, 0, 0); err != nil {
		return err
	}
	defer unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&own[0])), 0, 0, 0)
	for i := range n {
		name, _ := unix.BytePtrFromString(fmt.Sprintf("stc-%05d", i))
		if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0); err != nil {
			return err
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		_, err = c.Write(make([]byte, payload))
		c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
