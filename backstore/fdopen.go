package backstore

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Opening what File and Block hold: the O_DIRECT alignment the kernel reports, and a second
// descriptor that must be onto the same file as the first.

// dioAlignment asks the kernel (statx STATX_DIOALIGN, Linux 6.1 and later; block devices
// since 6.11) which alignment O_DIRECT needs for the memory and for the file offset and length.
// When the kernel does not say, it assumes fallbackMem and fallbackOff. supported is false
// when the kernel says that the file cannot do direct I/O at all.
func dioAlignment(fd int, fallbackMem, fallbackOff uint32) (mem, off uint32, supported bool, err error) {
	var stx unix.Statx_t
	err = unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &stx)
	if err != nil && err != unix.ENOSYS && err != unix.EINVAL {
		return 0, 0, false, err
	}
	if err != nil || stx.Mask&unix.STATX_DIOALIGN == 0 {
		return fallbackMem, fallbackOff, true, nil
	}
	if stx.Dio_mem_align == 0 || stx.Dio_offset_align == 0 {
		return 0, 0, false, nil
	}
	return stx.Dio_mem_align, stx.Dio_offset_align, true, nil
}

// sameFile reports whether two descriptors refer to the same file or device, so that a second
// open by path cannot silently land on a file that replaced the first one.
func sameFile(fd1, fd2 int) (bool, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(fd1, &a); err != nil {
		return false, err
	}
	if err := unix.Fstat(fd2, &b); err != nil {
		return false, err
	}
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Rdev == b.Rdev, nil
}

// reopen opens path again with flags and checks that it is the same file as fd.
func reopen(path string, fd, flags int) (int, error) {
	nfd, err := openRetry(path, flags, 0)
	if err != nil {
		return -1, err
	}
	same, err := sameFile(fd, nfd)
	if err != nil || !same {
		unix.Close(nfd)
		if err == nil {
			err = fmt.Errorf("%s was replaced while being opened", path)
		}
		return -1, err
	}
	return nfd, nil
}

func openRetry(path string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, mode)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
