//go:build linux && cgo

package verbs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// epollSet is an epoll set of several completion channels' descriptors, for one Serve of
// channels on several devices: each device has its own channel, and a goroutine parks in the
// netpoller on one file. The set is level-triggered inside; the netpoller watches the set's
// own descriptor. The serving channel makes it on first use and closes it with itself.
type epollSet struct {
	fd      int
	file    *os.File
	rc      syscall.RawConn
	members []epollMember
}

// epollMember is one channel's descriptor in an epollSet. Its file tells members apart (the
// set's reference keeps the pointer from being reused): a closed channel's descriptor number
// can come back as another channel's, which the set must still add.
type epollMember struct {
	file *os.File
	fd   int32
}

// hold makes the set hold exactly want's descriptors, want[0] the serving channel's, made on
// first use.
func (s *epollSet) hold(want []epollMember) error {
	if s.file == nil {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return fmt.Errorf("epoll_create1: %w", err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return fmt.Errorf("epoll: set O_NONBLOCK: %w", err)
		}
		s.fd = fd
		s.file = os.NewFile(uintptr(fd), "completion channels")
		rc, err := s.file.SyscallConn()
		if err != nil {
			s.file.Close()
			s.file, s.fd = nil, -1
			return err
		}
		s.rc = rc
		if err := s.add(want[0]); err != nil {
			return err
		}
	}
	for _, m := range s.members {
		found := false
		for _, w := range want {
			found = found || w == m
		}
		if !found {
			_ = unix.EpollCtl(s.fd, unix.EPOLL_CTL_DEL, int(m.fd), nil)
		}
	}
	members := s.members[:0]
	for _, w := range want {
		found := false
		for _, m := range s.members {
			found = found || w == m
		}
		if !found {
			if err := s.add(w); err != nil {
				return err
			}
		}
		members = append(members, w)
	}
	s.members = members
	_ = s.file.SetReadDeadline(time.Time{})
	return nil
}

// add puts m's descriptor in the set; one that is there already stays.
func (s *epollSet) add(m epollMember) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: m.fd}
	if err := unix.EpollCtl(s.fd, unix.EPOLL_CTL_ADD, int(m.fd), &ev); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("epoll_ctl: %w", err)
	}
	return nil
}

// drain takes the set's ready list after the channels were read, so that its descriptor is
// readable again only for events that come after.
func (s *epollSet) drain() {
	var evs [4]unix.EpollEvent
	for {
		n, err := unix.EpollWait(s.fd, evs[:], 0)
		if err != nil || n < len(evs) {
			return
		}
	}
}

// close closes the set, if it was made.
func (s *epollSet) close() {
	if s.file != nil {
		s.file.Close()
	}
}
