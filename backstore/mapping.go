package backstore

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Mapper is implemented by stores that know which parts of the medium hold storage and which
// are holes: the logical block provisioning status that GET LBA STATUS reports (SBC-3 5.7). A
// store that does not implement it has every block mapped.
type Mapper interface {
	// Mapping reports whether the logical block at off is mapped (storage is allocated for
	// it) and where the run of blocks in the same state that starts there ends, looking no
	// further than off+limit. off is a multiple of LogicalBlockSize inside [0, Size) and limit
	// is positive; end is a multiple of LogicalBlockSize in (off, min(off+limit, Size)]. A
	// logical block part of which is allocated counts as mapped: it cannot be read back as
	// zeroes without looking.
	Mapping(off, limit int64) (mapped bool, end int64, err error)
}

// mappingRange checks the arguments of Mapping against size and returns where the scan stops.
func mappingRange(size, off, limit int64) (stop int64, ok bool) {
	if off < 0 || off >= size || limit <= 0 {
		return 0, false
	}
	return off + min(limit, size-off), true
}

// acquireMapping is acquire for Mapping from off (limit bytes at most): where the answer stops
// (mappingRange), and s.mu.RUnlock is the caller's; or why there is no answer, holding
// nothing.
func (s *fdStore) acquireMapping(off, limit int64) (stop int64, err error) {
	if !s.acquire() {
		return 0, s.opError("mapping", off, ErrClosed)
	}
	stop, ok := mappingRange(s.size.Load(), off, limit)
	if !ok {
		s.mu.RUnlock()
		return 0, s.rangeError("mapping", off, limit)
	}
	return stop, nil
}

var (
	_ Mapper = (*File)(nil)
	_ Mapper = (*Memory)(nil)
	_ Mapper = (*Block)(nil)
)

// Mapping finds holes with lseek(2) SEEK_DATA and SEEK_HOLE, which every Linux filesystem
// answers (those without holes report all of the file as data). A hole is reported in whole
// logical blocks: a block that the filesystem has partly allocated (a filesystem block smaller
// than the logical block) is mapped.
func (f *File) Mapping(off, limit int64) (bool, int64, error) {
	stop, err := f.acquireMapping(off, limit)
	if err != nil {
		return false, 0, err
	}
	defer f.mu.RUnlock()
	lbs := int64(f.lbs)
	data, err := f.seek(off, unix.SEEK_DATA)
	if err != nil {
		return false, 0, f.opError("mapping: SEEK_DATA", off, err)
	}
	if hole := data &^ (lbs - 1); hole > off {
		return false, min(hole, stop), nil
	}
	// The block at off holds data from data on (data < off+lbs).
	end, err := f.seek(max(off, data), unix.SEEK_HOLE)
	if err != nil {
		return false, 0, f.opError("mapping: SEEK_HOLE", off, err)
	}
	end = (end + lbs - 1) &^ (lbs - 1)
	return true, min(end, stop), nil
}

// seek is lseek(2) on the page-cache descriptor; every transfer uses pread and pwrite, so the
// file offset it moves is not used by anything else. ENXIO (no data, or no hole, from off to
// the end of the file) comes back as the end of the file: the file's size is where the
// implicit hole at its end begins.
func (f *File) seek(off int64, whence int) (int64, error) {
	for {
		n, err := unix.Seek(f.fd, off, whence)
		switch {
		case err == nil:
			return n, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENXIO):
			return f.size.Load(), nil
		}
		return 0, err
	}
}

// Mapping reports the chunk map: a chunk that was never written, or was unmapped whole, is a
// hole. The map is read in 1 MiB chunks, and the absent levels of the chunk table are skipped
// whole, so that a scan of a large empty disk is quick.
func (m *Memory) Mapping(off, limit int64) (bool, int64, error) {
	t := m.table.Load()
	if t.closed {
		return false, 0, memError("mapping", off, ErrClosed)
	}
	stop, ok := mappingRange(t.size, off, limit)
	if !ok {
		return false, 0, memRangeError("mapping", off, limit, t.size)
	}
	idx := off >> memChunkShift
	mapped := m.chunkMapped(idx)
	pos := (idx + 1) << memChunkShift
	for pos < stop {
		idx = pos >> memChunkShift
		if !mapped {
			// Skip a missing middle level or leaf in one step.
			if mid := t.top[idx>>memTopShift].Load(); mid == nil {
				pos = (idx>>memTopShift + 1) << (memTopShift + memChunkShift)
				continue
			} else if mid[idx>>memLeafBits&memLevelMask].Load() == nil {
				pos = (idx>>memLeafBits + 1) << (memLeafBits + memChunkShift)
				continue
			}
		}
		if m.chunkMapped(idx) != mapped {
			break
		}
		pos += memChunkSize
	}
	return mapped, min(pos, stop), nil
}

// chunkMapped reports whether chunk idx holds RAM, under its stripe lock.
func (m *Memory) chunkMapped(idx int64) bool {
	s := &m.stripes[idx%memStripes]
	s.RLock()
	defer s.RUnlock()
	t := m.table.Load()
	return !t.closed && idx < memChunkCount(t.size) && t.chunk(idx) != nil
}

// Mapping reports the whole device mapped: a block device does not say which of its blocks
// are provisioned (a thin LVM volume or a discarding SSD keeps that to itself).
func (b *Block) Mapping(off, limit int64) (bool, int64, error) {
	stop, err := b.acquireMapping(off, limit)
	if err != nil {
		return false, 0, err
	}
	b.mu.RUnlock()
	return true, stop, nil
}

// sysfsRotational reads queue/rotational of the block device numbered dev: whether the device
// has spinning media. ok is false when sysfs does not say (no such device, as for tmpfs, whose
// device number is anonymous). A partition has no queue directory of its own; its disk's is
// one level up.
func sysfsRotational(dev uint64) (rotational, ok bool) {
	if unix.Major(dev) == 0 {
		return false, false
	}
	dir := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(dev), unix.Minor(dev))
	for _, p := range []string{dir + "/queue/rotational", dir + "/../queue/rotational"} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(data)) {
		case "0":
			return false, true
		case "1":
			return true, true
		}
		return false, false
	}
	return false, false
}
