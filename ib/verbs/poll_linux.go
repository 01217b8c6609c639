//go:build linux && cgo

package verbs

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pollable makes fd, an event file owned by rdma-core (a completion channel, a device's async
// event fd, the RDMA/CM event channel), waitable through Go's netpoller: it sets O_NONBLOCK
// (a flag of the open file description, so rdma-core's own reads of fd stop blocking too) and
// wraps a duplicate in an *os.File. Goroutines wait in RawConn.Read, parked in the netpoller,
// and never hold an OS thread in a blocking C call. Closing the File closes only the
// duplicate, and wakes a goroutine waiting on it; rdma-core still closes fd itself.
func pollable(fd int, name string) (*os.File, syscall.RawConn, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, nil, fmt.Errorf("%s: set O_NONBLOCK: %w", name, err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: dup: %w", name, err)
	}
	f := os.NewFile(uintptr(dup), name)
	// NewFile falls back to a blocking File when epoll refuses the fd; deadlines are only
	// supported on pollable files, which makes this the check.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: not pollable: %w", name, err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, rc, nil
}
