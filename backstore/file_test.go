package backstore

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestOpenFileCreatesSparse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.img")
	f, err := OpenFile(path, FileOptions{Size: 1 << 30, Create: true})
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, int64(1<<30), f.Size())
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, int64(1<<30), st.Size())
	require.Equal(t, fs.FileMode(0o600), st.Mode().Perm())
	// A sparse 1 GiB file has no data blocks; allow a few for filesystem bookkeeping.
	require.Less(t, fileBlocks(t, path), int64(64), "file was not created sparse")
}

func TestOpenFileOptions(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.img")
	require.NoError(t, os.WriteFile(existing, make([]byte, 3*4096+100), 0o600))
	tiny := filepath.Join(dir, "tiny.img")
	require.NoError(t, os.WriteFile(tiny, make([]byte, 100), 0o600))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))

	cases := []struct {
		name     string
		path     string
		opts     FileOptions
		wantErr  string
		errIs    error
		wantSize int64
		wantLBS  uint32
		wantPBS  uint32
	}{
		{name: "missing without create", path: filepath.Join(dir, "nope"), errIs: fs.ErrNotExist},
		{name: "create without size", path: filepath.Join(dir, "a"), opts: FileOptions{Create: true}, wantErr: "not a positive multiple"},
		{name: "create with partial block", path: filepath.Join(dir, "b"), opts: FileOptions{Create: true, Size: 4096 + 1}, wantErr: "not a positive multiple"},
		{name: "create read-only", path: filepath.Join(dir, "c"), opts: FileOptions{Create: true, Size: 4096, ReadOnly: true}, wantErr: "read-only", errIs: fs.ErrNotExist},
		{name: "block size not a power of two", path: existing, opts: FileOptions{LogicalBlockSize: 1000}, wantErr: "logical block size 1000"},
		{name: "block size too small", path: existing, opts: FileOptions{LogicalBlockSize: 256}, wantErr: "logical block size 256"},
		{name: "block size too large", path: existing, opts: FileOptions{LogicalBlockSize: 128 << 10}, wantErr: "logical block size 131072"},
		{name: "physical smaller than logical", path: existing, opts: FileOptions{LogicalBlockSize: 4096, PhysicalBlockSize: 512}, wantErr: "physical block size 512"},
		{name: "physical not power-of-two multiple", path: existing, opts: FileOptions{PhysicalBlockSize: 1536}, wantErr: "physical block size 1536"},
		{name: "directory", path: dir, wantErr: "not a regular file"},
		{name: "character device", path: "/dev/null", wantErr: "not a regular file"},
		{name: "fifo is refused without blocking", path: fifo, wantErr: "not a regular file"},
		{name: "smaller than a block", path: tiny, wantErr: "less than one 512-byte block"},
		{name: "existing file, defaults", path: existing, wantSize: 3*4096 + 0, wantLBS: 512, wantPBS: 512},
		{name: "existing file rounds down to whole blocks", path: existing, opts: FileOptions{LogicalBlockSize: 4096}, wantSize: 3 * 4096, wantLBS: 4096, wantPBS: 4096},
		{name: "existing file keeps its size", path: existing, opts: FileOptions{Size: 1 << 20, Create: true, PhysicalBlockSize: 4096}, wantSize: 3 * 4096, wantLBS: 512, wantPBS: 4096},
		{name: "create", path: filepath.Join(dir, "new"), opts: FileOptions{Size: 1 << 20, Create: true, LogicalBlockSize: 4096, PhysicalBlockSize: 16384}, wantSize: 1 << 20, wantLBS: 4096, wantPBS: 16384},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := OpenFile(c.path, c.opts)
			if c.wantErr != "" || c.errIs != nil {
				require.Nil(t, f)
				requireRefused(t, err, c.wantErr, c.errIs)
				return
			}
			require.NoError(t, err)
			defer f.Close()
			require.Equal(t, c.wantSize, f.Size())
			require.Equal(t, c.wantLBS, f.LogicalBlockSize())
			require.Equal(t, c.wantPBS, f.PhysicalBlockSize())
		})
	}
	// A refused creation leaves nothing behind.
	for _, name := range []string{"a", "b", "c"} {
		_, err := os.Stat(filepath.Join(dir, name))
		require.ErrorIs(t, err, fs.ErrNotExist, name)
	}
}

func TestOpenFileConcurrentCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raced.img")
	var wg sync.WaitGroup
	files := make([]*File, 4)
	errs := make([]error, 4)
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			files[i], errs[i] = OpenFile(path, FileOptions{Size: 1 << 20, Create: true})
		}()
	}
	wg.Wait()
	for i := range files {
		require.NoError(t, errs[i])
		require.Equal(t, int64(1<<20), files[i].Size())
		require.NoError(t, files[i].Close())
	}
}

// TestFileDirectPath checks which descriptor serves which buffer, that both return the right
// data, and that the direct one really bypasses the page cache.
func TestFileDirectPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "direct.img")
	f, err := OpenFile(path, FileOptions{Size: 8 << 20, Create: true, Direct: true})
	require.NoError(t, err)
	defer f.Close()
	require.GreaterOrEqual(t, f.dfd, 0)
	t.Logf("O_DIRECT alignment: memory %d, offset %d", f.memAlign, f.offAlign)

	var mu sync.Mutex
	var took []bool
	f.onIO = func(direct bool) {
		mu.Lock()
		took = append(took, direct)
		mu.Unlock()
	}
	last := func() bool {
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, took)
		return took[len(took)-1]
	}

	const n = 64 << 10
	cases := []struct {
		name       string
		buf        func() []byte
		off        int64
		fua        bool
		wantDirect bool
	}{
		{"page-aligned buffer", func() []byte { return alignedBuf(t, n) }, 1 << 20, false, true},
		{"page-aligned buffer, fua", func() []byte { return alignedBuf(t, n) }, 2 << 20, true, true},
		{"unaligned buffer", func() []byte { return unalignedBuf(n) }, 3 << 20, false, false},
		{"unaligned buffer, fua", func() []byte { return unalignedBuf(n) }, 4 << 20, true, false},
		{"aligned buffer, unaligned offset", func() []byte { return alignedBuf(t, n) }, 5<<20 + 1, false, false},
		{"aligned buffer, unaligned length", func() []byte { return alignedBuf(t, n)[:n-3] }, 6 << 20, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.buf()
			fillPattern(p, c.off, 3)
			require.NoError(t, f.WriteAt(p, c.off, c.fua))
			require.Equal(t, c.wantDirect, last(), "write descriptor")

			got := c.buf()
			require.NoError(t, f.ReadAt(got, c.off))
			require.Equal(t, c.wantDirect, last(), "read descriptor")
			require.True(t, bytes.Equal(p, got))

			// The other path sees the same bytes: the two descriptors are coherent.
			other := unalignedBuf(len(p))
			if !c.wantDirect {
				other = alignedBuf(t, n)[:len(p)]
			}
			require.NoError(t, f.ReadAt(other, c.off))
			require.True(t, bytes.Equal(p, other))
		})
	}

	t.Run("kernel refuses an alignment it did not report", func(t *testing.T) {
		// Pretend the kernel had reported no alignment needs: the direct descriptor gets an
		// unaligned buffer, fails with EINVAL, and the transfer must finish through the page
		// cache instead of failing.
		memAlign, offAlign := f.memAlign, f.offAlign
		f.memAlign, f.offAlign = 1, 1
		defer func() { f.memAlign, f.offAlign = memAlign, offAlign }()
		const off = 3<<20 + 7
		p := unalignedBuf(1000)
		fillPattern(p, off, 8)
		require.NoError(t, f.WriteAt(p, off, true))
		require.True(t, last(), "the direct descriptor was not tried first")
		got := unalignedBuf(1000)
		require.NoError(t, f.ReadAt(got, off))
		require.True(t, last())
		require.True(t, bytes.Equal(p, got))
	})

	t.Run("direct write leaves the page cache cold", func(t *testing.T) {
		const off, length = 7 << 20, 256 << 10
		p := alignedBuf(t, length)
		fillPattern(p, off, 9)
		require.NoError(t, f.WriteAt(p, off, false))
		require.True(t, last())
		require.Zero(t, residentPages(t, path, off, length), "O_DIRECT write went through the page cache")

		q := unalignedBuf(length)
		fillPattern(q, off, 10)
		require.NoError(t, f.WriteAt(q, off, false))
		require.False(t, last())
		require.Equal(t, length/os.Getpagesize(), residentPages(t, path, off, length), "buffered write did not use the page cache")
	})
}

// residentPages counts the pages of [off, off+length) of the file that are in the page cache.
func residentPages(t *testing.T, path string, off, length int) int {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	m, err := unix.Mmap(fd, int64(off), length, unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(m)
	vec := make([]byte, length/os.Getpagesize())
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(m))), uintptr(len(m)),
		uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	require.Zero(t, e, "mincore: %v", e)
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

func TestFileUnmapReleasesSpace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "punch.img")
	f, err := OpenFile(path, FileOptions{Size: 16 << 20, Create: true, Direct: true})
	require.NoError(t, err)
	defer f.Close()

	const off, length = 4 << 20, 8 << 20
	p := alignedBuf(t, length)
	fillPattern(p, off, 1)
	require.NoError(t, f.WriteAt(p, off, false))
	require.NoError(t, f.Flush())
	before := fileBlocks(t, path)
	require.GreaterOrEqual(t, before, int64(length/512))

	// Punch the middle 4 MiB.
	require.NoError(t, f.Unmap(off+2<<20, 4<<20))
	after := fileBlocks(t, path)
	require.LessOrEqual(t, after, before-int64(4<<20)/512, "punch hole released no space")

	got := make([]byte, length)
	require.NoError(t, f.ReadAt(got, off))
	want := bytes.Clone(p)
	clear(want[2<<20 : 6<<20])
	require.True(t, bytes.Equal(want, got))
}

// TestFileZeroingFallbacks makes fallocate refuse modes, as filesystems without them do, and
// checks that Unmap and WriteZeroes still leave zeroes, and that other errors come through.
func TestFileZeroingFallbacks(t *testing.T) {
	const zeroRange = unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE
	const punchHole = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
	cases := []struct {
		name      string
		refuse    map[uint32]error
		op        string // unmap or zero
		wantModes []uint32
		wantErr   error
	}{
		{name: "zero range", op: "zero", wantModes: []uint32{zeroRange}},
		{name: "no zero range: punch", op: "zero", refuse: map[uint32]error{zeroRange: unix.EOPNOTSUPP}, wantModes: []uint32{zeroRange, punchHole}},
		{name: "no fallocate: write zeroes", op: "zero", refuse: map[uint32]error{zeroRange: unix.EOPNOTSUPP, punchHole: unix.EOPNOTSUPP}, wantModes: []uint32{zeroRange, punchHole}},
		{name: "zero range out of space", op: "zero", refuse: map[uint32]error{zeroRange: unix.ENOSPC}, wantModes: []uint32{zeroRange}, wantErr: unix.ENOSPC},
		{name: "punch", op: "unmap", wantModes: []uint32{punchHole}},
		{name: "no punch: write zeroes", op: "unmap", refuse: map[uint32]error{punchHole: unix.EOPNOTSUPP}, wantModes: []uint32{punchHole}},
		{name: "punch I/O error", op: "unmap", refuse: map[uint32]error{punchHole: unix.EIO}, wantModes: []uint32{punchHole}, wantErr: unix.EIO},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, _ := newFile(t, 2<<20)
			defer f.Close()
			var modes []uint32
			f.fallocate = func(fd int, mode uint32, off, length int64) error {
				modes = append(modes, mode)
				if err := c.refuse[mode]; err != nil {
					return err
				}
				return unix.Fallocate(fd, mode, off, length)
			}
			all := make([]byte, 2<<20)
			fillPattern(all, 0, 5)
			require.NoError(t, f.WriteAt(all, 0, false))

			// 600 KiB, unaligned to the 256 KiB zero buffer, inside the file.
			const off, length = 512, 600 << 10
			var err error
			if c.op == "zero" {
				err = f.WriteZeroes(off, length)
			} else {
				err = f.Unmap(off, length)
			}
			require.Equal(t, c.wantModes, modes)
			got := make([]byte, 2<<20)
			require.NoError(t, f.ReadAt(got, 0))
			if c.wantErr != nil {
				require.ErrorIs(t, err, c.wantErr)
				require.True(t, bytes.Equal(all, got), "a failed zeroing changed data")
				return
			}
			require.NoError(t, err)
			clear(all[off : off+length])
			require.True(t, bytes.Equal(all, got))
		})
	}
}

// TestFileOnTmpfs runs WriteZeroes where FALLOC_FL_ZERO_RANGE really is missing.
func TestFileOnTmpfs(t *testing.T) {
	var sfs unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		t.Skip("/dev/shm is not a tmpfs here; the ZERO_RANGE fallback is covered by TestFileZeroingFallbacks")
	}
	dir, err := os.MkdirTemp("/dev/shm", "backstore-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	f, err := OpenFile(filepath.Join(dir, "t.img"), FileOptions{Size: 1 << 20, Create: true})
	require.NoError(t, err)
	defer f.Close()
	require.ErrorIs(t, unix.Fallocate(f.fd, unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096), unix.EOPNOTSUPP,
		"tmpfs gained ZERO_RANGE; this test no longer reaches the fallback")

	all := make([]byte, 1<<20)
	fillPattern(all, 0, 2)
	require.NoError(t, f.WriteAt(all, 0, true))
	require.NoError(t, f.WriteZeroes(4096, 8192))
	clear(all[4096 : 4096+8192])
	got := make([]byte, 1<<20)
	require.NoError(t, f.ReadAt(got, 0))
	require.True(t, bytes.Equal(all, got))
}

func TestFileRefreshSeesOutsideTruncate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resize.img")
	f, err := OpenFile(path, FileOptions{Size: 1 << 20, Create: true, LogicalBlockSize: 4096})
	require.NoError(t, err)
	defer f.Close()

	// Grow outside: the new size shows only after Refresh, rounded down to whole blocks.
	require.NoError(t, os.Truncate(path, 2<<20+100))
	require.Equal(t, int64(1<<20), f.Size())
	p := make([]byte, 4096)
	require.ErrorIs(t, f.ReadAt(p, 1<<20), ErrOutOfRange)
	size, err := f.Refresh()
	require.NoError(t, err)
	require.Equal(t, int64(2<<20), size)
	require.Equal(t, int64(2<<20), f.Size())
	require.NoError(t, f.ReadAt(p, 2<<20-4096))

	// Shrink outside: before Refresh the missing tail is an unexpected EOF, not zeroes.
	require.NoError(t, os.Truncate(path, 512<<10))
	err = f.ReadAt(p, 1<<20)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.ErrorContains(t, err, path)
	// A read that starts inside the file and runs past its end fails the same way.
	require.ErrorIs(t, f.ReadAt(make([]byte, 8192), 512<<10-4096), io.ErrUnexpectedEOF)
	size, err = f.Refresh()
	require.NoError(t, err)
	require.Equal(t, int64(512<<10), size)
	require.ErrorIs(t, f.ReadAt(p, 1<<20), ErrOutOfRange)
}

// TestFileDirectAlignmentRefused needs a filesystem whose O_DIRECT offset alignment is 4096:
// ext4 on a 4096-byte-sector loop device.
func TestFileDirectAlignmentRefused(t *testing.T) {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("mkfs.ext4 not installed: cannot make a filesystem with 4096-byte O_DIRECT alignment")
	}
	lo := attachLoop(t, 64<<20, 4096)
	out, err := exec.Command(mkfs, "-q", "-F", lo.path).CombinedOutput()
	require.NoError(t, err, "mkfs.ext4: %s", out)
	mnt := t.TempDir()
	require.NoError(t, unix.Mount(lo.path, mnt, "ext4", 0, ""))
	t.Cleanup(func() { require.NoError(t, unix.Unmount(mnt, 0)) })

	path := filepath.Join(mnt, "disk.img")
	_, err = OpenFile(path, FileOptions{Size: 1 << 20, Create: true, Direct: true, LogicalBlockSize: 512})
	require.ErrorContains(t, err, "smaller than the O_DIRECT alignment 4096")
	_, err = os.Stat(path)
	require.ErrorIs(t, err, fs.ErrNotExist, "a refused open left the file it created")

	// Without O_DIRECT 512-byte blocks are fine; with 4096-byte blocks O_DIRECT is too.
	f, err := OpenFile(path, FileOptions{Size: 1 << 20, Create: true, LogicalBlockSize: 512})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	f, err = OpenFile(path, FileOptions{Direct: true, LogicalBlockSize: 4096})
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, int64(4096), f.offAlign)
	var direct []bool
	f.onIO = func(d bool) { direct = append(direct, d) }
	p := alignedBuf(t, 8192)
	fillPattern(p, 4096, 4)
	require.NoError(t, f.WriteAt(p, 4096, true))
	got := alignedBuf(t, 8192)
	require.NoError(t, f.ReadAt(got, 4096))
	require.True(t, bytes.Equal(p, got))
	// A 512-byte-aligned offset is not enough here: it must take the page cache and still work.
	q := alignedBuf(t, 4096)
	require.NoError(t, f.ReadAt(q, 4096+512))
	require.True(t, bytes.Equal(p[512:4096+512], q))
	require.Equal(t, []bool{true, true, false}, direct)
}

// TestFileUnmapGranularity checks that a file reports its filesystem's block size as the unit in
// which Unmap frees space, and the rotation of the disk under it as sysfs tells it.
func TestFileUnmapGranularity(t *testing.T) {
	dir := t.TempDir()
	f, err := OpenFile(filepath.Join(dir, "g.img"), FileOptions{Size: 1 << 20, Create: true})
	require.NoError(t, err)
	defer f.Close()
	var sfs unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &sfs))
	require.Positive(t, sfs.Bsize)
	require.Equal(t, int64(sfs.Bsize), f.Capabilities().UnmapGranularity)
	var st unix.Stat_t
	require.NoError(t, unix.Stat(dir, &st))
	rot, ok := sysfsRotational(st.Dev)
	require.Equal(t, ok && !rot, f.Capabilities().NonRotational)
}
