package backstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// alignedBuf returns n bytes of page-aligned memory (as registered RDMA buffers are), unmapped
// when the test ends.
func alignedBuf(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, unix.Munmap(b)) })
	return b
}

// newFile creates a file store of size bytes in a directory of the test's own and returns it
// with its path.
func newFile(t testing.TB, size int64) (*File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lun.img")
	f, err := OpenFile(path, FileOptions{Size: size, Create: true})
	require.NoError(t, err)
	return f, path
}

// requireRefused requires an error that says msg (unless empty) and is errIs (unless nil).
func requireRefused(t testing.TB, err error, msg string, errIs error) {
	t.Helper()
	require.Error(t, err)
	if msg != "" {
		require.ErrorContains(t, err, msg)
	}
	if errIs != nil {
		require.ErrorIs(t, err, errIs)
	}
}

// unalignedBuf returns n bytes starting one byte past an allocation: no O_DIRECT alignment
// can be met.
func unalignedBuf(n int) []byte {
	return make([]byte, n+1)[1:]
}

// fillPattern fills p with bytes that depend on seed and on the absolute device offset of
// each byte, so that data landing at the wrong offset shows.
func fillPattern(p []byte, off int64, seed byte) {
	for i := range p {
		x := uint64(off) + uint64(i)
		p[i] = byte(x) ^ byte(x>>9) ^ byte(x>>17) ^ seed ^ 0x5a
		if p[i] == 0 {
			p[i] = seed | 1 // never zero, so that zeroes are told apart from data
		}
	}
}

// fileBlocks returns st_blocks (512-byte units) of the file at path.
func fileBlocks(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st.Blocks
}

// loDevice is a loop device attached by a test.
type loDevice struct {
	path    string // /dev/loopN
	backing string // the file behind it
	fd      int    // kept open until detach: with LO_FLAGS_AUTOCLEAR the last close detaches
}

const loFlagsAutoclear = 4 // LO_FLAGS_AUTOCLEAR, <linux/loop.h>; not in x/sys

// attachLoop attaches a sparse file of size bytes to a free loop device with the given logical
// block size, and detaches it when the test ends. It skips the test, saying why, when loop
// devices cannot be used here.
func attachLoop(t testing.TB, size int64, blockSize uint32) *loDevice {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("attaching a loop device needs root")
	}
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no usable /dev/loop-control (%v): cannot attach a loop device", err)
	}
	defer unix.Close(ctl)

	backing := filepath.Join(t.TempDir(), "loop.img")
	bf, err := os.OpenFile(backing, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, err)
	defer bf.Close()
	require.NoError(t, bf.Truncate(size))

	// Another process may take the free device between LOOP_CTL_GET_FREE and LOOP_CONFIGURE;
	// then LOOP_CONFIGURE fails with EBUSY and we ask again.
	for attempt := 0; attempt < 20; attempt++ {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		require.NoError(t, err, "LOOP_CTL_GET_FREE")
		dev := "/dev/loop" + strconv.Itoa(n)
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			t.Skipf("%s was allocated but has no device node here", dev)
		}
		require.NoError(t, err, "open %s", dev)
		cfg := unix.LoopConfig{Fd: uint32(bf.Fd()), Size: blockSize}
		cfg.Info.Flags = loFlagsAutoclear
		err = unix.IoctlLoopConfigure(fd, &cfg)
		if errors.Is(err, unix.EBUSY) {
			unix.Close(fd)
			continue
		}
		if err != nil {
			unix.Close(fd)
			t.Skipf("LOOP_CONFIGURE on %s failed (%v): loop devices are not usable here", dev, err)
		}
		lo := &loDevice{path: dev, backing: backing, fd: fd}
		t.Cleanup(func() {
			// EBUSY/ENXIO only if autoclear already detached it; either way it is gone.
			_ = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
			unix.Close(fd)
		})
		return lo
	}
	t.Fatalf("no free loop device after 20 attempts")
	return nil
}

// queueAttr reads /sys/class/block/<dev>/queue/<name> as an integer.
func queueAttr(t testing.TB, dev, name string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/sys/class/block/%s/queue/%s", filepath.Base(dev), name))
	require.NoError(t, err)
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	require.NoError(t, err)
	return n
}
