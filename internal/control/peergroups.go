//go:build !386

package control

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerGroups reads SO_PEERGROUPS (Linux 4.13, net/core/sock.c): the Peer's supplementary
// groups as gid_t values. The kernel answers ERANGE with the length it needs when the buffer
// is too small. golang.org/x/sys/unix has no wrapper for this option.
func peerGroups(fd int, _ uint32) ([]uint32, error) {
	n := 64
	for {
		buf := make([]uint32, n)
		size := uint32(4 * n)
		_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case errno == 0:
			return buf[:size/4], nil
		case errno == syscall.ERANGE && int(size/4) > n:
			n = int(size / 4)
		default:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", errno)
		}
	}
}
