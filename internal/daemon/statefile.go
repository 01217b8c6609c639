package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/srptarget/srptarget/lib/fileperm"
	"golang.org/x/sys/unix"
)

// maxStateFile bounds a saved reservations file: the most registrations a logical unit takes
// (256) make about 50 KiB of it, and anything much larger was not written by this daemon.
const maxStateFile = 1 << 20

// The files under state_dir decide who may write to shared storage at start: a registration
// or an Exclusive Access reservation planted there fences every initiator, and one removed
// lets a fenced node back in. They get the rules of the backstores and the configuration file:
// the directory and the files are taken only when they are what they claim (a directory, a
// regular file: never a symbolic link, whose target anyone who can change the link chooses,
// nor a FIFO, whose open or read would block start and reload), when no one but the daemon's
// user or root can have written them (owner, and no group or world write permission, as sshd's
// StrictModes), and, for the files, when they are small. Every check is made on the open
// descriptor (fstat(2)), so it describes what is then read whatever happens to the path.

// stateProblem says what is wrong with a state directory or file of owner uid and mode mode,
// and how to fix it; "" when nothing is.
func stateProblem(path string, uid, mode uint32) string {
	euid := uint32(os.Geteuid())
	what, fix := fileperm.Problem(path, uid, mode, euid, strconv.FormatUint(uint64(euid), 10))
	if what == "" {
		return ""
	}
	return fmt.Sprintf("%s, so another user could have planted or changed persistent reservations; check what it holds, then fix it with %s", what, fix)
}

// stateError is the error about the state directory or file at path.
func stateError(path, format string, args ...any) error {
	return fmt.Errorf("state %s: %s", path, fmt.Sprintf(format, args...))
}

// openFailed turns the error of an open(2) with O_NOFOLLOW of path into one that says what was
// found there: a symbolic link as the last component fails with ELOOP, or with ENOTDIR under
// O_DIRECTORY, which Lstat tells apart from their other causes.
func openFailed(path string, err error) error {
	var st unix.Stat_t
	if (err == unix.ELOOP || err == unix.ENOTDIR) && unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		target, rerr := os.Readlink(path)
		if rerr != nil {
			target = "?"
		}
		return stateError(path, "is a symbolic link (to %s), which is not followed: remove it, and name the real directory in state_dir", target)
	}
	if err == unix.ENOTDIR {
		return stateError(path, "is not a directory")
	}
	return stateError(path, "%v", err)
}

// openStateDir opens the state directory dir and checks it. A missing directory is
// fs.ErrNotExist, unless create asks to make it (mode 0700, with any missing parent).
func openStateDir(dir string, create bool) (int, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Open(dir, flags, 0)
	if err == unix.ENOENT && create {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return -1, stateError(dir, "%v", err)
		}
		fd, err = unix.Open(dir, flags, 0)
	}
	if err == unix.ENOENT {
		return -1, fs.ErrNotExist
	}
	if err != nil {
		return -1, openFailed(dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, stateError(dir, "fstat: %v", err)
	}
	if msg := stateProblem(dir, st.Uid, st.Mode); msg != "" {
		unix.Close(fd)
		return -1, stateError(dir, "refusing the state directory: %s", msg)
	}
	return fd, nil
}

// readStateFile reads the state file at path, fs.ErrNotExist when it or its directory does
// not exist. O_NONBLOCK makes the open of a FIFO return at once, and fstat then refuses it.
func readStateFile(path string) ([]byte, error) {
	dfd, err := openStateDir(filepath.Dir(path), false)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, filepath.Base(path), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err == unix.ENOENT {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, openFailed(path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, stateError(path, "fstat: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, stateError(path, "is not a regular file (%s): move it away", fileType(st.Mode))
	}
	if msg := stateProblem(path, st.Uid, st.Mode); msg != "" {
		return nil, stateError(path, "refusing the saved persistent reservations: %s", msg)
	}
	if st.Size > maxStateFile {
		return nil, stateError(path, "%d bytes, more than the %d a state file can hold: it was not written by srptarget; move it away", st.Size, maxStateFile)
	}
	data := make([]byte, st.Size+1) // one more, to see it grow
	n, err := readFull(fd, data)
	if err != nil {
		return nil, stateError(path, "read: %v", err)
	}
	if n > int(st.Size) {
		return nil, stateError(path, "changed while it was read")
	}
	return data[:n], nil
}

// readFull reads into b until it is full or the end of the file.
func readFull(fd int, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Read(fd, b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// fileType names the type of a file mode for an error.
func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	}
	return "type " + strconv.FormatUint(uint64(mode&unix.S_IFMT), 8)
}

// writeStateFile replaces path with data atomically and durably: a temporary file in the same
// directory is written and synced, renamed over path, and the directory synced so that the
// rename survives a power loss. Nil data removes path. The directory is checked as
// readStateFile does, and made (0700) if needed; every name is resolved from its descriptor,
// and the temporary file is made with O_EXCL, so that nothing planted meanwhile is followed.
func writeStateFile(path string, data []byte) error {
	dir, name := filepath.Dir(path), filepath.Base(path)
	dfd, err := openStateDir(dir, data != nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removing from a directory that does not exist
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if data == nil {
		if err := unix.Unlinkat(dfd, name, 0); err != nil && err != unix.ENOENT {
			return stateError(path, "remove: %v", err)
		}
		return syncFD(dfd, dir)
	}
	var tmp string
	fd := -1
	for range 10 {
		tmp = name + ".tmp" + strconv.FormatUint(uint64(rand.Uint32()), 10)
		fd, err = unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != unix.EEXIST {
			break
		}
	}
	if err != nil {
		return stateError(filepath.Join(dir, tmp), "create: %v", err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir, tmp))
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return stateError(path, "write: %v", err)
	}
	return syncFD(dfd, dir)
}

// syncFD makes the entries of the directory open as fd durable.
func syncFD(fd int, dir string) error {
	if err := unix.Fsync(fd); err != nil {
		return stateError(dir, "fsync: %v", err)
	}
	return nil
}
