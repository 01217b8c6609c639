package backstore

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/srptarget/srptarget/lib/fileperm"
	"golang.org/x/sys/unix"
)

// ErrSymlink is wrapped by the error of OpenFile for a path whose last component is a
// symbolic link. The daemon typically runs as root and every initiator reads and writes the
// file: a link that another user can create or change (in /tmp, say, where fs.protected_symlinks
// is often off) would export whatever file it points to, /etc/shadow included. open(2) with
// O_NOFOLLOW refuses the link itself; directories on the way are still followed.
var ErrSymlink = errors.New("is a symbolic link, which is not followed")

// SharedFileError is the error of OpenFile for a file that a user other than the daemon's can
// change, and of OpenBlock for a device node every user can write, unless the options allow
// it. Whoever can write a backstore reads and alters what every initiator stores on it, behind
// their backs and without the target knowing.
type SharedFileError struct {
	Path string
	// UID is the owner of the file and EUID the effective uid of this process.
	UID, EUID uint32
	// Mode is the file's mode (permission bits included), from fstat(2) of the open descriptor.
	Mode uint32
	// Device is set for a block device node, of which only world write permission is refused:
	// device nodes normally belong to root and group disk (mode 0660), and a daemon running as
	// another user reaches them through that group.
	Device bool
}

func (e *SharedFileError) Error() string {
	perm := e.Mode & 0o7777
	if e.Device {
		return fmt.Sprintf("backstore %s: device node mode %04o lets every user write the disk; fix it with `chmod o-w %s` "+
			"(and the udev rule that sets it), or accept the shared device explicitly", e.Path, perm, e.Path)
	}
	var what, fixes []string
	if e.UID != e.EUID {
		what = append(what, fmt.Sprintf("it is owned by uid %d instead of uid %d that opens it", e.UID, e.EUID))
		fixes = append(fixes, fmt.Sprintf("`chown %d %s`", e.EUID, e.Path))
	}
	if w, fix := fileperm.Writable(e.Path, perm); w != "" {
		what, fixes = append(what, w), append(fixes, fix)
	}
	return fmt.Sprintf("backstore %s: %s, so another user can read or change what initiators store on it; fix it with %s, "+
		"or accept the shared file explicitly", e.Path, strings.Join(what, " and "), strings.Join(fixes, " and "))
}

// symlinkError describes the refused link at path, with where it points.
func symlinkError(path string) error {
	target, err := os.Readlink(path)
	if err != nil {
		target = "?"
	}
	return fmt.Errorf("backstore %s: %w (it points to %s): name the real file instead, so that whoever can change the link cannot point the LUN at another file",
		path, ErrSymlink, target)
}

// checkPrivateFile refuses a regular file that another user can write, as sshd does with its
// configuration and key files (sshd(8), "StrictModes"): one not owned by the process's
// effective uid (its owner can always chmod it), or group- or world-writable. st comes from
// fstat(2) of the open descriptor, so it describes the file that will be used whatever
// happens to the path meanwhile.
func checkPrivateFile(path string, st *unix.Stat_t) error {
	euid := uint32(os.Geteuid())
	if st.Uid == euid && st.Mode&0o022 == 0 {
		return nil
	}
	return &SharedFileError{Path: path, UID: st.Uid, EUID: euid, Mode: st.Mode}
}

// checkPrivateDevice refuses a block device node that every user can write (see
// SharedFileError.Device).
func checkPrivateDevice(path string, st *unix.Stat_t) error {
	if st.Mode&0o002 == 0 {
		return nil
	}
	return &SharedFileError{Path: path, UID: st.Uid, EUID: uint32(os.Geteuid()), Mode: st.Mode, Device: true}
}
