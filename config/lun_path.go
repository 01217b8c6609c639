package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The validator's checks of the backstores a path names: a file (made with create: true in a
// directory that exists, or under StateDir) and a block device.

// StateDir is the daemon's own directory (systemd's StateDirectory=srptarget makes it): files
// created under it may be in directories that do not exist yet.
const StateDir = "/var/lib/srptarget"

// checkFileDir checks the directory a file backstore with create: true is made in. A missing
// directory is an error, so that a typo in the path fails rather than making a new directory
// tree somewhere, except under StateDir, the daemon's own, where serve makes it (mode 0700,
// see backstore.OpenFile) and validate only warns. A directory that cannot be made, because
// what should be one of its parents is a file, is an error.
func (v *validator) checkFileDir(p []any, file string) {
	dir := filepath.Dir(file)
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		switch {
		case err == nil && !st.IsDir():
			v.errorf(p, "%s is not a directory, so %s cannot be in it", d, filepath.Base(file))
			return
		case err == nil && d == dir:
			return
		case err == nil && inStateDir(dir):
			v.warnf(p, "directory %s does not exist: serve makes it (mode 0700) with the file", dir)
			return
		case err == nil:
			v.errorf(p, "directory %s does not exist: make it (install -d -m 0700 %s), or correct the path; only under %s does serve make missing directories", dir, dir, StateDir)
			return
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) || d == filepath.Dir(d):
			return // not ours to look at (the daemon's user may be able to): serve checks it
		}
	}
}

// inStateDir reports whether dir is StateDir or below it.
func inStateDir(dir string) bool {
	return dir == StateDir || strings.HasPrefix(dir, StateDir+"/")
}

// validateFileLUN checks a file backstore: its path, and unless textOnly the file there, or
// the directory create: true makes it in.
func (v *validator) validateFileLUN(l *LUN, i int) {
	if l.Path == "" {
		v.errorf(At("luns", i, "path"), "a file backstore needs a path")
		return
	}
	if !filepath.IsAbs(l.Path) || v.textOnly {
		return
	}
	// Lstat: a symbolic link is refused when the daemon opens the file (see
	// backstore.ErrSymlink), so it is an error here too.
	if st, err := os.Lstat(l.Path); err == nil {
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(l.Path)
			v.errorf(At("luns", i, "path"), "%s is a symbolic link to %s: name the real file (links are not followed, so that whoever can change one cannot point the LUN at another file)", l.Path, target)
		case !st.Mode().IsRegular():
			v.errorf(At("luns", i, "path"), "%s is not a regular file (use backstore: block for devices)", l.Path)
		}
	} else if os.IsNotExist(err) {
		if !l.Create {
			v.errorf(At("luns", i, "path"), "%s does not exist (set create: true and a size to make it)", l.Path)
		} else if l.Size == 0 {
			v.errorf(At("luns", i, "size"), "create: true needs a size")
		}
		if l.Create {
			v.checkFileDir(At("luns", i, "path"), l.Path)
		}
	} else if errors.Is(err, unix.ENOTDIR) {
		v.checkFileDir(At("luns", i, "path"), l.Path)
	} else if errors.Is(err, fs.ErrPermission) {
		// Backstores normally live in a directory only the daemon's user can enter, and
		// validate is often run by someone else: the daemon checks the file when it opens it.
		v.warnf(At("luns", i, "path"), "cannot check %s: %v (validate as the user srptarget runs as to check it)", l.Path, err)
	} else {
		v.errorf(At("luns", i, "path"), "%v", err)
	}
}

// validateBlockLUN checks a block backstore: a path to a block device, no size of its own.
func (v *validator) validateBlockLUN(l *LUN, i int) {
	if l.Path == "" {
		v.errorf(At("luns", i, "path"), "a block backstore needs a path")
		return
	}
	if filepath.IsAbs(l.Path) && !v.textOnly {
		if st, err := os.Stat(l.Path); err != nil {
			v.errorf(At("luns", i, "path"), "%v", err)
		} else if st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
			v.errorf(At("luns", i, "path"), "%s is not a block device", l.Path)
		}
	}
	if l.Size != 0 {
		v.errorf(At("luns", i, "size"), "a block device has its own size; remove size")
	}
	if l.Create {
		v.errorf(At("luns", i, "create"), "create applies to files only")
	}
}
