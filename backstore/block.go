package backstore

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BlockOptions says how to open a block device as a backstore.
type BlockOptions struct {
	// ReadOnly opens the device for reading only: writes, Unmap and WriteZeroes fail with EROFS.
	ReadOnly bool
	// Shared skips the exclusive claim on the device. By default the device is opened with
	// O_EXCL, which fails with EBUSY while it is mounted, part of an MD/LVM/dm stack or claimed
	// by another exclusive opener: exporting a device that the target host also writes to
	// corrupts it.
	Shared bool
	// AllowSharedFile accepts a device node that every user can write (mode o+w). Without it
	// OpenBlock refuses one with a *SharedFileError: whoever can write the disk reads and
	// changes what initiators store on it.
	AllowSharedFile bool
}

// Block is a backstore on a block device (a disk, a partition, an LVM volume, a loop device).
// Transfers go through O_DIRECT when aligned, so the target host's page cache neither
// duplicates the initiator's cache nor delays writes.
type Block struct {
	fdStore
	maxDiscard    int64 // discard_max_bytes; 0 when the device cannot discard
	nonRotational bool  // queue/rotational is 0
}

var _ Backstore = (*Block)(nil)

// OpenBlock opens the block device at path. The sizes come from the device: BLKGETSIZE64,
// BLKSSZGET (logical block) and BLKPBSZGET (physical block).
//
// Unlike OpenFile, OpenBlock follows a symbolic link: the stable names of disks are links
// that udev makes (/dev/disk/by-id/*, /dev/mapper/*, /dev/VG/LV) in directories only root can
// write, and refusing them would push configurations to /dev/sdX names that change between
// boots. What matters is what was opened: the open descriptor must be a block device
// (fstat(2)), so a link can lead to no other kind of file, and its node must not be
// world-writable unless opts.AllowSharedFile. The owner is not checked: device nodes belong
// to root and group disk (mode 0660), and a daemon running as another user opens them as a
// member of that group.
func OpenBlock(path string, opts BlockOptions) (*Block, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("backstore %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return nil, fmt.Errorf("backstore %s: not a block device (mode %#o); use the file backstore for regular files", path, st.Mode&unix.S_IFMT)
	}

	flags := unix.O_RDWR
	if opts.ReadOnly {
		flags = unix.O_RDONLY
	}
	exclusive := 0
	if !opts.Shared {
		exclusive = unix.O_EXCL
	}
	// The exclusive claim belongs to the direct descriptor; the page-cache one is an ordinary
	// open, which a claim does not prevent.
	dfd, err := openRetry(path, flags|unix.O_DIRECT|exclusive, 0)
	if err != nil {
		if err == unix.EBUSY && exclusive != 0 {
			return nil, fmt.Errorf("backstore %s: open: device in use (mounted, or claimed by another user): %w", path, err)
		}
		return nil, fmt.Errorf("backstore %s: open with O_DIRECT: %w", path, err)
	}
	b := &Block{}
	b.fdStore = fdStore{path: path, fd: -1, dfd: dfd, readOnly: opts.ReadOnly}
	fail := func(err error) (*Block, error) {
		unix.Close(dfd)
		if b.fd >= 0 {
			unix.Close(b.fd)
		}
		return nil, err
	}
	if err := unix.Fstat(dfd, &st); err != nil {
		return fail(fmt.Errorf("backstore %s: %w", path, err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return fail(fmt.Errorf("backstore %s: not a block device (mode %#o)", path, st.Mode&unix.S_IFMT))
	}
	if !opts.AllowSharedFile {
		if err := checkPrivateDevice(path, &st); err != nil {
			return fail(err)
		}
	}

	lbs, err := unix.IoctlGetUint32(dfd, unix.BLKSSZGET)
	if err != nil {
		return fail(fmt.Errorf("backstore %s: BLKSSZGET: %w", path, err))
	}
	if !validBlockSize(lbs) {
		return fail(fmt.Errorf("backstore %s: logical block size %d not supported", path, lbs))
	}
	pbs, err := unix.IoctlGetUint32(dfd, unix.BLKPBSZGET)
	if err != nil {
		return fail(fmt.Errorf("backstore %s: BLKPBSZGET: %w", path, err))
	}
	if pbs < lbs || pbs&(pbs-1) != 0 {
		pbs = lbs // a device that reports nonsense gets no physical-block hint
	}
	b.lbs, b.pbs = lbs, pbs
	if _, err := b.readSize(); err != nil {
		return fail(err)
	}

	// Without a STATX_DIOALIGN answer assume what block devices have always needed: offsets
	// and lengths in logical blocks, memory aligned to 512 bytes. A device that wants more gets
	// EINVAL, and the transfer is redone through the page cache.
	mem, off, ok, err := dioAlignment(dfd, 512, lbs)
	if err != nil {
		return fail(fmt.Errorf("backstore %s: statx: %w", path, err))
	}
	if !ok {
		mem, off = 512, lbs
	}
	b.memAlign, b.offAlign = uintptr(mem), int64(off)

	b.fd, err = reopen(path, dfd, flags)
	if err != nil {
		return fail(fmt.Errorf("backstore %s: open: %w", path, err))
	}
	if rot, ok := sysfsRotational(st.Rdev); ok {
		b.nonRotational = !rot
	}
	if !opts.ReadOnly {
		b.atomic = sysfsAtomic("/sys", st.Rdev, lbs)
	}
	b.maxDiscard = discardMaxBytes(st.Rdev)
	b.maxDiscard -= b.maxDiscard % int64(lbs)
	return b, nil
}

// readSize asks the device for its size and stores it; the caller holds the lock or owns b.
func (b *Block) readSize() (int64, error) {
	n, err := unix.IoctlGetUint64(b.dfd, unix.BLKGETSIZE64)
	if err != nil {
		return b.size.Load(), fmt.Errorf("backstore %s: BLKGETSIZE64: %w", b.path, err)
	}
	size := int64(n) - int64(n)%int64(b.lbs)
	b.size.Store(size)
	return size, nil
}

// discardMaxBytes reads queue/discard_max_bytes of the device numbered rdev: the largest
// discard the device accepts, 0 when it cannot discard. A partition has no queue directory of
// its own; its disk's is one level up.
func discardMaxBytes(rdev uint64) int64 {
	dir := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(rdev), unix.Minor(rdev))
	for _, p := range []string{dir + "/queue/discard_max_bytes", dir + "/../queue/discard_max_bytes"} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	return 0
}

// blockRangeIoctl issues BLKDISCARD or BLKZEROOUT, which take a pointer to {start, length} in
// bytes. golang.org/x/sys has no typed helper for them. Callers use the direct descriptor: it
// holds our exclusive claim, so the kernel simply drops the range's cached pages. Through the
// other descriptor it would find the device claimed (by us) and fall back to invalidating the
// pages, which can fail with EBUSY.
func blockRangeIoctl(fd int, req uintptr, off, length int64) error {
	r := [2]uint64{uint64(off), uint64(length)}
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&r)))
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		default:
			return e
		}
	}
}

// Unmap discards the range (BLKDISCARD). What a discarded range reads back as is up to the
// device, so Capabilities does not promise zeroes. A device that cannot discard fails it with
// EOPNOTSUPP.
func (b *Block) Unmap(off, length int64) error {
	return b.rangeOp("unmap", off, length, func() error {
		if b.maxDiscard == 0 {
			return unix.EOPNOTSUPP
		}
		return blockRangeIoctl(b.dfd, unix.BLKDISCARD, off, length)
	})
}

// WriteZeroes zeroes the range with BLKZEROOUT: the kernel uses the device's WRITE ZEROES or
// WRITE SAME when it has one and writes zero pages otherwise, and drops the cached pages of
// the range either way.
func (b *Block) WriteZeroes(off, length int64) error {
	return b.rangeOp("write zeroes", off, length, func() error {
		return blockRangeIoctl(b.dfd, unix.BLKZEROOUT, off, length)
	})
}

// Refresh asks the device for its size again (a grown LVM volume, a re-read loop device).
func (b *Block) Refresh() (int64, error) {
	if !b.acquire() {
		return 0, fmt.Errorf("backstore %s: refresh: %w", b.path, ErrClosed)
	}
	defer b.mu.RUnlock()
	return b.readSize()
}

// Capabilities: Unmap when the device can discard. UnmapZeroes is never claimed: the old
// BLKDISCARDZEROES answer is hard-wired to 0 in current kernels, and devices that do return
// zeroes after a discard do not say so reliably.
func (b *Block) Capabilities() Capabilities {
	return Capabilities{Unmap: b.maxDiscard > 0, MaxUnmapBytes: b.maxDiscard, NonRotational: b.nonRotational}
}
