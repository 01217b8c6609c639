package backstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// FileOptions says how to open a regular file as a backstore.
type FileOptions struct {
	// Size is the capacity in bytes of a file that does not exist yet; OpenFile creates it
	// sparse (no block allocated) with this size. It must be a positive multiple of
	// LogicalBlockSize. An existing file keeps its own size and Size is ignored.
	Size int64
	// Create allows OpenFile to create the file when it does not exist. Without it a missing
	// file is an error, so that a typo in a path cannot silently export an empty disk. A new
	// file gets mode 0600, and missing directories on its path are made with mode 0700: the
	// data initiators store is nobody else's business.
	Create bool
	// ReadOnly opens the file for reading only: writes, Unmap and WriteZeroes fail with EROFS.
	ReadOnly bool
	// LogicalBlockSize is the SCSI block size in bytes: a power of two from 512 to 65536.
	// 0 means 512.
	LogicalBlockSize uint32
	// PhysicalBlockSize is advertised as the preferred I/O unit: LogicalBlockSize times a power
	// of two. 0 means LogicalBlockSize.
	PhysicalBlockSize uint32
	// Direct opens the file a second time with O_DIRECT and sends every suitably aligned
	// transfer through it, bypassing the page cache. The initiator has its own cache, so a
	// second one in the target only costs memory and a copy.
	Direct bool
	// AllowSharedFile accepts an existing file that another user can write: one not owned by
	// the process's effective uid, or group- or world-writable. Without it OpenFile refuses
	// such a file with a *SharedFileError, because that user could read and change what every
	// initiator stores on it. It never makes OpenFile follow a symbolic link (ErrSymlink).
	AllowSharedFile bool
}

// File is a backstore on a regular file. Holes in a sparse file read back as zeroes, and
// Unmap punches holes, so thin provisioning costs nothing.
type File struct {
	fdStore

	// fallocate is unix.Fallocate; tests replace it to reach the fallbacks for filesystems
	// without FALLOC_FL_ZERO_RANGE or FALLOC_FL_PUNCH_HOLE.
	fallocate func(fd int, mode uint32, off, length int64) error

	// fsBlock is the filesystem's block size (statfs f_bsize), the unit in which a punched
	// hole frees space.
	fsBlock int64
	// nonRotational is true when the disk under the filesystem says queue/rotational 0.
	nonRotational bool
}

var _ Backstore = (*File)(nil)

// OpenFile opens (and with opts.Create, creates) the regular file at path as a backstore.
// The capacity is the file's size rounded down to a whole number of logical blocks.
//
// The last component of path must not be a symbolic link (ErrSymlink), and the file must
// belong to the process's effective uid and be writable by nobody else, unless
// opts.AllowSharedFile (*SharedFileError).
func OpenFile(path string, opts FileOptions) (*File, error) {
	lbs, err := checkBlockSize("backstore "+path, opts.LogicalBlockSize)
	if err != nil {
		return nil, err
	}
	pbs := opts.PhysicalBlockSize
	if pbs == 0 {
		pbs = lbs
	}
	if pbs < lbs || pbs&(pbs-1) != 0 {
		return nil, fmt.Errorf("backstore %s: physical block size %d is not a power-of-two multiple of the logical block size %d", path, pbs, lbs)
	}

	// Look before opening: opening a FIFO would block, and a block device has its own type.
	// Lstat, because a symbolic link is refused rather than followed (ErrSymlink); the open
	// below has O_NOFOLLOW for a link that appears meanwhile.
	var st unix.Stat_t
	err = unix.Lstat(path, &st)
	switch {
	case err == nil:
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, symlinkError(path)
		}
		if err := checkRegular(path, st.Mode); err != nil {
			return nil, err
		}
	case err == unix.ENOENT && opts.Create:
	default:
		return nil, fmt.Errorf("backstore %s: %w", path, err)
	}

	flags := unix.O_RDWR
	if opts.ReadOnly {
		flags = unix.O_RDONLY
	}
	fd, created, err := openOrCreate(path, flags, opts)
	if err != nil {
		return nil, err
	}
	f := &File{fallocate: unix.Fallocate}
	f.fdStore = fdStore{path: path, fd: fd, dfd: -1, lbs: lbs, pbs: pbs, readOnly: opts.ReadOnly}
	fail := func(err error) (*File, error) {
		unix.Close(fd)
		if f.dfd >= 0 {
			unix.Close(f.dfd)
		}
		if created {
			unix.Unlink(path)
		}
		return nil, err
	}

	if err := unix.Fstat(fd, &st); err != nil {
		return fail(fmt.Errorf("backstore %s: %w", path, err))
	}
	if err := checkRegular(path, st.Mode); err != nil {
		return fail(err)
	}
	if !opts.AllowSharedFile {
		if err := checkPrivateFile(path, &st); err != nil {
			return fail(err)
		}
	}
	size := st.Size - st.Size%int64(lbs)
	if size <= 0 {
		return fail(fmt.Errorf("backstore %s: size %d is less than one %d-byte block", path, st.Size, lbs))
	}
	f.size.Store(size)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err == nil && sfs.Bsize > 0 {
		f.fsBlock = int64(sfs.Bsize)
	}
	if rot, ok := sysfsRotational(st.Dev); ok {
		f.nonRotational = !rot
	}

	if opts.Direct {
		mem, off, ok, err := dioAlignment(fd, 512, 512)
		if err != nil {
			return fail(fmt.Errorf("backstore %s: statx: %w", path, err))
		}
		if !ok {
			return fail(fmt.Errorf("backstore %s: the filesystem does not support O_DIRECT", path))
		}
		if lbs < off {
			return fail(fmt.Errorf("backstore %s: logical block size %d is smaller than the O_DIRECT alignment %d of the filesystem", path, lbs, off))
		}
		f.dfd, err = reopen(path, fd, flags|unix.O_DIRECT|unix.O_NOFOLLOW)
		if err != nil {
			return fail(fmt.Errorf("backstore %s: open with O_DIRECT: %w", path, err))
		}
		f.memAlign, f.offAlign = uintptr(mem), int64(off)
		if !opts.ReadOnly {
			f.atomic = statxAtomic(f.dfd, lbs)
		}
	}
	return f, nil
}

// openOrCreate opens path, creating it when allowed. A new file is made under a temporary
// name, given its size and only then linked to path, so that a concurrent opener never sees
// it empty; losing the race to another creator just opens the file the other made. A
// directory missing on the way is made, mode 0700.
func openOrCreate(path string, flags int, opts FileOptions) (fd int, created bool, err error) {
	madeDir := false
	for {
		fd, err = openRetry(path, flags|unix.O_NOFOLLOW, 0)
		if err == nil {
			return fd, false, nil
		}
		if err == unix.ELOOP {
			// O_NOFOLLOW met a symbolic link as the last component (open(2)); ELOOP also
			// means too many links on the way, which Lstat tells apart.
			var st unix.Stat_t
			if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return -1, false, symlinkError(path)
			}
		}
		if err != unix.ENOENT || !opts.Create {
			return -1, false, fmt.Errorf("backstore %s: open: %w", path, err)
		}
		if opts.ReadOnly {
			return -1, false, fmt.Errorf("backstore %s: cannot create a file that is to be opened read-only: %w", path, err)
		}
		lbs := int64(opts.LogicalBlockSize)
		if lbs == 0 {
			lbs = 512
		}
		if opts.Size <= 0 || opts.Size%lbs != 0 {
			return -1, false, fmt.Errorf("backstore %s: size %d for a new file is not a positive multiple of the %d-byte block", path, opts.Size, lbs)
		}
		fd, err = createSized(path, flags, opts.Size)
		if err == nil {
			return fd, true, nil
		}
		if err == unix.ENOENT && !madeDir {
			// The directory is missing (the file itself is made with O_EXCL). 0700: only the
			// daemon's user can list it or reach the file inside.
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return -1, false, fmt.Errorf("backstore %s: create its directory: %w", path, err)
			}
			madeDir = true
			continue
		}
		if err != unix.EEXIST {
			return -1, false, fmt.Errorf("backstore %s: create: %w", path, err)
		}
	}
}

var tmpSeq atomic.Uint64

// createSized creates a sparse file of size bytes at path, mode 0600, or fails with EEXIST
// when path exists. The file is made under a temporary name in the same directory and
// hard-linked into place; link(2) never replaces an existing name. Every creating open has
// O_EXCL|O_NOFOLLOW: O_EXCL alone already fails on any existing name, a symbolic link
// included (open(2)), and O_NOFOLLOW says so.
func createSized(path string, flags int, size int64) (int, error) {
	dir, base := filepath.Split(path)
	var tmp string
	var fd int
	for {
		tmp = filepath.Join(dir, fmt.Sprintf(".%s.%d.%d.tmp", base, os.Getpid(), tmpSeq.Add(1)))
		var err error
		fd, err = openRetry(tmp, flags|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err == nil {
			break
		}
		if err != unix.EEXIST {
			return -1, err
		}
	}
	defer unix.Unlink(tmp)
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("set size %d: %w", size, err)
	}
	err := unix.Link(tmp, path)
	if err == nil {
		return fd, nil
	}
	unix.Close(fd)
	if err != unix.EPERM && err != unix.EOPNOTSUPP {
		return -1, err
	}
	// A filesystem without hard links (vfat, some FUSE): create in place. A concurrent opener
	// may then see the file empty for a moment, and refuses it as smaller than a block.
	fd, err = openRetry(path, flags|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return -1, err
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		unix.Unlink(path)
		return -1, fmt.Errorf("set size %d: %w", size, err)
	}
	return fd, nil
}

func checkRegular(path string, mode uint32) error {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFBLK:
		return fmt.Errorf("backstore %s: is a block device; use the block backstore", path)
	default:
		return fmt.Errorf("backstore %s: not a regular file (mode %#o)", path, mode&unix.S_IFMT)
	}
}

// Unmap punches a hole: the filesystem frees the blocks and the range reads back as zeroes.
// On a filesystem that cannot punch holes it writes zeroes, to keep the UnmapZeroes promise.
func (f *File) Unmap(off, length int64) error {
	return f.rangeOp("unmap", off, length, func() error {
		err := f.fallocate(f.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = f.writeZeroesByWriting(off, length)
		}
		return err
	})
}

// WriteZeroes zeroes the range with FALLOC_FL_ZERO_RANGE, which keeps the blocks allocated
// (as unwritten extents: no data is written), so that later writes to the range cannot run
// out of space. Filesystems without it (tmpfs) punch a hole instead, and those without either
// get zeroes written.
func (f *File) WriteZeroes(off, length int64) error {
	return f.rangeOp("write zeroes", off, length, func() error {
		err := f.fallocate(f.fd, unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, length)
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = f.fallocate(f.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
		}
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = f.writeZeroesByWriting(off, length)
		}
		return err
	})
}

// Refresh stats the file again, so that a resize made outside the daemon (truncate, a VM image
// tool) becomes the new capacity.
func (f *File) Refresh() (int64, error) {
	if !f.acquire() {
		return 0, fmt.Errorf("backstore %s: refresh: %w", f.path, ErrClosed)
	}
	defer f.mu.RUnlock()
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return f.size.Load(), fmt.Errorf("backstore %s: refresh: %w", f.path, err)
	}
	size := st.Size - st.Size%int64(f.lbs)
	f.size.Store(size)
	return size, nil
}

// Capabilities: punched holes read back as zeroes, and a hole can be as large as the file; the
// filesystem frees space in its own blocks.
func (f *File) Capabilities() Capabilities {
	return Capabilities{Unmap: true, UnmapZeroes: true, UnmapGranularity: f.fsBlock, NonRotational: f.nonRotational}
}
