package backstore

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// requireWaiting checks that the operation whose error done yields has not completed after d,
// held at a lock the test holds; what fails says msg and the error it returned.
func requireWaiting(t *testing.T, done <-chan error, d time.Duration, msg string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s (%v)", msg, err)
	case <-time.After(d):
	}
}

// TestMemoryReadHoldsItsChunks: a read takes the locks of every chunk of its range before it
// copies, so that it sees an atomic write across chunks whole or not at all. With the second
// chunk's lock held by the test, a read of both chunks stops before copying; a write to the
// first chunk alone must then wait for that read, and the read returns the old data of both.
// (Were the read to lock a chunk at a time, it would copy the first chunk and wait at the
// second with the first unlocked, and the write would get through.)
func TestMemoryReadHoldsItsChunks(t *testing.T) {
	m, err := NewMemory(3*memChunkSize, 512)
	require.NoError(t, err)
	old := bytes.Repeat([]byte{1}, 8192)
	require.NoError(t, m.WriteAt(old, memChunkSize-4096, false))

	second := &m.stripes[1]
	second.Lock()
	got := make([]byte, 8192) // the last 4 KiB of chunk 0 and the first of chunk 1
	readDone := make(chan error, 1)
	go func() { readDone <- m.ReadAt(got, memChunkSize-4096) }()
	time.Sleep(20 * time.Millisecond) // the read takes the first chunk's lock and waits at the second

	writeDone := make(chan error, 1)
	go func() { writeDone <- m.WriteAt(bytes.Repeat([]byte{2}, 4096), memChunkSize-4096, false) }()
	requireWaiting(t, writeDone, 100*time.Millisecond, "a write to a chunk being read completed during the read")
	second.Unlock()
	require.NoError(t, <-readDone)
	require.NoError(t, <-writeDone)
	require.Equal(t, old, got, "the read saw the write")
}

// TestMemoryAtomicWrite: WriteAtomicAt writes across chunks, up to memAtomicMax.
func TestMemoryAtomicWrite(t *testing.T) {
	m, err := NewMemory(32<<20, 512)
	require.NoError(t, err)
	require.Equal(t, AtomicLimits{MaxBytes: 16 << 20}, m.AtomicLimits())
	p := bytes.Repeat([]byte{7}, 3<<20)
	require.NoError(t, m.WriteAtomicAt(p, memChunkSize-512, true))
	got := make([]byte, len(p))
	require.NoError(t, m.ReadAt(got, memChunkSize-512))
	require.Equal(t, p, got)
	require.ErrorIs(t, m.WriteAtomicAt(make([]byte, 17<<20), 0, false), unix.EINVAL)
	require.ErrorIs(t, m.WriteAtomicAt(p, 31<<20, false), ErrOutOfRange)
}

// TestKernelAtomicLimits maps the kernel's atomic write unit to AtomicLimits.
func TestKernelAtomicLimits(t *testing.T) {
	require.Equal(t, AtomicLimits{}, kernelAtomicLimits(0, 0, 512))
	require.Equal(t, AtomicLimits{MinBytes: 4096, MaxBytes: 1 << 20, PowerOfTwo: true}, kernelAtomicLimits(4096, 1<<20, 512))
	require.Equal(t, AtomicLimits{MinBytes: 4096, MaxBytes: 65536, PowerOfTwo: true}, kernelAtomicLimits(512, 65536, 4096))
	require.Equal(t, AtomicLimits{}, kernelAtomicLimits(512, 2048, 4096)) // smaller than a block
	require.Equal(t, AtomicLimits{}, kernelAtomicLimits(512, 3072, 512))  // not a power of two
}

// TestSysfsAtomic reads a block device's queue/atomic_write_unit_{min,max}_bytes, and its
// disk's for a partition, from a sysfs tree made for the test.
func TestSysfsAtomic(t *testing.T) {
	root := t.TempDir()
	disk := filepath.Join(root, "devices/sda")
	require.NoError(t, os.MkdirAll(filepath.Join(disk, "queue"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(disk, "sda1"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(disk, "queue/atomic_write_unit_min_bytes"), []byte("4096\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(disk, "queue/atomic_write_unit_max_bytes"), []byte("65536\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "dev/block"), 0o755))
	require.NoError(t, os.Symlink(disk, filepath.Join(root, "dev/block/8:0")))
	require.NoError(t, os.Symlink(filepath.Join(disk, "sda1"), filepath.Join(root, "dev/block/8:1")))

	want := AtomicLimits{MinBytes: 4096, MaxBytes: 65536, PowerOfTwo: true}
	require.Equal(t, want, sysfsAtomic(root, unix.Mkdev(8, 0), 512))
	require.Equal(t, want, sysfsAtomic(root, unix.Mkdev(8, 1), 512))
	require.Equal(t, AtomicLimits{}, sysfsAtomic(root, unix.Mkdev(9, 0), 512))
	require.NoError(t, os.WriteFile(filepath.Join(disk, "queue/atomic_write_unit_max_bytes"), []byte("0\n"), 0o644))
	require.Equal(t, AtomicLimits{}, sysfsAtomic(root, unix.Mkdev(8, 0), 512))
}

// TestFileAtomicWrite opens a file backstore where the kernel makes atomic writes and writes
// through pwritev2(RWF_ATOMIC). It needs such a filesystem: XFS on Linux 6.16 or later does it
// on any device; set SRPT_ATOMIC_DIR to a directory there (make a loop-mounted XFS image as
// root: truncate -s 512M x.img; mkfs.xfs x.img; mount -o loop x.img /mnt/x). Elsewhere
// (ext4 without an atomic device, Linux before 6.11) the store must report no atomic writes,
// which the second half checks on the test's temporary directory.
func TestFileAtomicWrite(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "plain.img")
	f, err := OpenFile(plain, FileOptions{Size: 1 << 20, Create: true, LogicalBlockSize: 512, Direct: true})
	require.NoError(t, err)
	if f.AtomicLimits().MaxBytes == 0 {
		require.ErrorIs(t, f.WriteAtomicAt(alignedBuf(t, 4096), 0, false), unix.EINVAL, "a store without atomic writes makes none")
	}
	require.NoError(t, f.Close())

	dir := os.Getenv("SRPT_ATOMIC_DIR")
	if dir == "" {
		t.Skip("SRPT_ATOMIC_DIR is not set: no filesystem with atomic writes to test on")
	}
	path := filepath.Join(dir, "atomic.img")
	t.Cleanup(func() { os.Remove(path) })
	f, err = OpenFile(path, FileOptions{Size: 8 << 20, Create: true, LogicalBlockSize: 512, Direct: true})
	require.NoError(t, err)
	defer f.Close()
	l := f.AtomicLimits()
	require.True(t, l.PowerOfTwo && l.MinBytes >= 512 && l.MaxBytes >= l.MinBytes, "%s reports no atomic writes: %+v", dir, l)
	t.Logf("atomic write unit %d..%d bytes", l.MinBytes, l.MaxBytes)

	p := alignedBuf(t, int(l.MaxBytes))
	for i := range p {
		p[i] = byte(i * 13)
	}
	require.NoError(t, f.WriteAtomicAt(p, l.MaxBytes, true))
	got := alignedBuf(t, len(p))
	require.NoError(t, f.ReadAt(got, l.MaxBytes))
	require.Equal(t, p, got)
	// What does not fit RWF_ATOMIC's rule is refused before the kernel sees it...
	require.ErrorIs(t, f.WriteAtomicAt(p, l.MaxBytes+l.MinBytes, false), unix.EINVAL)
	require.ErrorIs(t, f.WriteAtomicAt(p[:l.MinBytes+512], 0, false), unix.EINVAL)
	// ...and the kernel itself refuses such a write with RWF_ATOMIC, which shows the flag
	// reaches it: without it the same write succeeds.
	_, err = unix.Pwritev2(f.dfd, [][]byte{p}, l.MaxBytes+l.MinBytes, unix.RWF_ATOMIC)
	require.ErrorIs(t, err, unix.EINVAL)
	_, err = unix.Pwritev2(f.dfd, [][]byte{p}, l.MaxBytes+l.MinBytes, 0)
	require.NoError(t, err)
}

// TestMemoryOneChunkRead: a read inside one chunk (readOneChunk) returns what was written, or
// zeroes where nothing was, like a read that crosses chunks (transfer); it waits while its
// chunk's lock is held exclusively (an atomic write copying), and fails as transfer does on
// a range past the end or a closed store.
func TestMemoryOneChunkRead(t *testing.T) {
	const size = 3 * memChunkSize
	m, err := NewMemory(size, 512)
	require.NoError(t, err)
	shadow := make([]byte, size)
	for i, w := range []struct{ off, n int64 }{{0, 4096}, {memChunkSize - 1024, 2048}, {2*memChunkSize + 512, 8192}} {
		p := bytes.Repeat([]byte{byte(i + 1)}, int(w.n))
		require.NoError(t, m.WriteAt(p, w.off, false))
		copy(shadow[w.off:], p)
	}
	for _, r := range []struct{ off, n int64 }{
		{0, 4096}, {512, 512}, {4096, 4096}, // written, then never written, in chunk 0
		{memChunkSize - 4096, 4096},  // the end of chunk 0
		{memChunkSize - 2048, 4096},  // across chunks 0 and 1: transfer
		{memChunkSize, memChunkSize}, // the whole of chunk 1
		{2 * memChunkSize, 16384},    // chunk 2, part written
		{size - 512, 512},            // the last block
	} {
		got := bytes.Repeat([]byte{0xEE}, int(r.n))
		require.NoError(t, m.ReadAt(got, r.off), "read %d at %d", r.n, r.off)
		require.Equal(t, shadow[r.off:r.off+r.n], got, "read %d at %d", r.n, r.off)
	}
	require.ErrorIs(t, m.ReadAt(make([]byte, 1024), size-512), ErrOutOfRange)
	require.ErrorIs(t, m.ReadAt(make([]byte, 512), -512), ErrOutOfRange)

	stripe := &m.stripes[0]
	stripe.Lock()
	readDone := make(chan error, 1)
	go func() { readDone <- m.ReadAt(make([]byte, 4096), 0) }()
	requireWaiting(t, readDone, 50*time.Millisecond, "a read of a chunk whose lock an atomic write holds completed")
	stripe.Unlock()
	require.NoError(t, <-readDone)

	require.NoError(t, m.Close())
	require.ErrorIs(t, m.ReadAt(make([]byte, 4096), 0), ErrClosed)
}
