//go:build rbd && cgo

package rbd

/*
#include <stdint.h>
#include <unistd.h>
#include <rbd/librbd.h>

// srpt_rbd_watch_cb runs on a librbd thread when the image header changes (a resize among
// other things): it only wakes the Go side through the eventfd given as its argument.
static void srpt_rbd_watch_cb(void *arg) {
	uint64_t one = 1;
	ssize_t r = write((int)(intptr_t)arg, &one, sizeof one);
	(void)r;
}

static int srpt_rbd_update_watch(rbd_image_t img, uint64_t *handle, int fd) {
	return rbd_update_watch(img, handle, srpt_rbd_watch_cb, (void *)(intptr_t)fd);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// An image's watch: librbd calls back on its own thread when the header changes, and a Go
// goroutine, woken through an eventfd, calls the user's function.

// Watch calls fn, on a goroutine of its own, after the image's header changed (a resize, a
// snapshot, a lock handed over): fn re-reads what it cares about. One watch per image.
func (im *Image) Watch(fn func()) error {
	im.watchMu.Lock()
	defer im.watchMu.Unlock()
	if im.watching {
		return errors.New("rbd: image already watched")
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	if err := errno(C.srpt_rbd_update_watch(im.img, &im.watchH, C.int(fd))); err != nil {
		unix.Close(fd)
		return fmt.Errorf("rbd_update_watch %s: %w", im.name, err)
	}
	im.wfd = os.NewFile(uintptr(fd), "rbd-watch")
	im.watched = make(chan struct{})
	im.watching = true
	go func() {
		defer close(im.watched)
		var buf [8]byte
		for {
			if _, err := im.wfd.Read(buf[:]); err != nil {
				return
			}
			fn()
		}
	}()
	return nil
}

// Unwatch ends Watch and waits until its callback has returned; Close does it too. Call it
// holding no lock that the callback takes.
func (im *Image) Unwatch() error {
	im.watchMu.Lock()
	defer im.watchMu.Unlock()
	if !im.watching {
		return nil
	}
	var err error
	// rbd_update_unwatch waits for the C callback in progress, so nothing writes the eventfd
	// once it is closed.
	if e := errno(C.rbd_update_unwatch(im.img, im.watchH)); e != nil {
		err = fmt.Errorf("rbd_update_unwatch %s: %w", im.name, e)
	}
	im.wfd.Close()
	<-im.watched
	im.watching = false
	return err
}
