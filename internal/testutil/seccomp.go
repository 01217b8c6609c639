package testutil

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DenySyscalls makes the system calls nrs fail with EPERM in every thread of the process, as
// systemd's SystemCallFilter= with SystemCallErrorNumber=EPERM does: a seccomp filter, which
// cannot be taken off again, so that a test calls it in a child process of its own (the test
// binary run again with an environment variable that says so).
func DenySyscalls(nrs ...uint32) error {
	const (
		ldW   = 0x00 | 0x00 | 0x20 // BPF_LD | BPF_W | BPF_ABS
		jeqK  = 0x05 | 0x10 | 0x00 // BPF_JMP | BPF_JEQ | BPF_K
		retK  = 0x06 | 0x00        // BPF_RET | BPF_K
		allow = 0x7fff0000         // SECCOMP_RET_ALLOW
		errno = 0x00050000         // SECCOMP_RET_ERRNO
		tsync = 1                  // SECCOMP_FILTER_FLAG_TSYNC
	)
	prog := []unix.SockFilter{{Code: ldW, K: 0}} // seccomp_data.nr
	for i, nr := range nrs {
		// to the EPERM return, after the other comparisons
		prog = append(prog, unix.SockFilter{Code: jeqK, Jt: uint8(len(nrs) - i), K: nr})
	}
	prog = append(prog, unix.SockFilter{Code: retK, K: allow}, unix.SockFilter{Code: retK, K: errno | uint32(unix.EPERM)})
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, 1 /* SECCOMP_SET_MODE_FILTER */, tsync, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	runtime.KeepAlive(prog)
	return nil
}
