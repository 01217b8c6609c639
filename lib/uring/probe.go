package uring

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Whether this kernel, and the sandbox around the process, lets a ring work at all.

// Probe uses every system call a ring needs (io_uring_setup, io_uring_register,
// io_uring_enter) once: it registers a page, reads a page of /dev/zero into it through the
// ring and checks what came back. It returns nil where rings work, and an error wrapping
// ErrUnsupported where the kernel or a seccomp filter refuses one of the calls.
func Probe() error {
	r, err := New(1, Options{})
	if err != nil {
		return err
	}
	defer r.Close()
	page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("uring: probe: %w", err)
	}
	defer unix.Munmap(page)
	page[0] = 1
	if err := r.RegisterBuffer(page); err != nil {
		return refused(err)
	}
	fd, err := unix.Open("/dev/zero", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("uring: probe: %w", err)
	}
	defer unix.Close(fd)
	if err := r.Read(fd, page, 0, 7); err != nil {
		return fmt.Errorf("uring: probe: %w", err)
	}
	if err := r.Wait(); err != nil {
		return refused(err)
	}
	var got Completion
	if r.Reap(func(c Completion) { got = c }) != 1 || got.Tag != 7 || got.Res != int32(len(page)) || page[0] != 0 {
		return fmt.Errorf("uring: probe: a read of /dev/zero through the ring gave %d bytes (tag %d), first byte %d", got.Res, got.Tag, page[0])
	}
	return nil
}

// refused marks an error of io_uring_register or io_uring_enter that a seccomp filter or
// the kernel's policy gives (EPERM, ENOSYS, EACCES) as ErrUnsupported.
func refused(err error) error {
	for _, e := range []unix.Errno{unix.EPERM, unix.ENOSYS, unix.EACCES} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
	}
	return err
}
