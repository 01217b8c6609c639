package backstore

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestOpenBlockRefusesNonDevices(t *testing.T) {
	regular := filepath.Join(t.TempDir(), "plain.img")
	require.NoError(t, os.WriteFile(regular, make([]byte, 4096), 0o600))
	cases := []struct {
		name    string
		path    string
		wantErr string
		errIs   error
	}{
		{"regular file", regular, "not a block device (mode 0100000); use the file backstore", nil},
		{"character device", "/dev/null", "not a block device (mode 020000)", nil},
		{"directory", t.TempDir(), "not a block device (mode 040000)", nil},
		{"missing", filepath.Join(t.TempDir(), "nope"), "", fs.ErrNotExist},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := OpenBlock(c.path, BlockOptions{})
			require.Nil(t, b)
			requireRefused(t, err, c.wantErr, c.errIs)
		})
	}
}

func TestBlockGeometry(t *testing.T) {
	for _, bs := range []uint32{512, 4096} {
		t.Run(map[uint32]string{512: "512", 4096: "4096"}[bs], func(t *testing.T) {
			const size = 16 << 20
			lo := attachLoop(t, size, bs)
			b, err := OpenBlock(lo.path, BlockOptions{})
			require.NoError(t, err)
			defer b.Close()
			require.Equal(t, int64(size), b.Size())
			require.Equal(t, bs, b.LogicalBlockSize())
			require.Equal(t, uint32(queueAttr(t, lo.path, "physical_block_size")), b.PhysicalBlockSize())
			require.Equal(t, int64(bs), b.offAlign)
			maxDiscard := queueAttr(t, lo.path, "discard_max_bytes")
			require.Positive(t, maxDiscard, "a loop device on ext4 can discard")
			require.Equal(t, Capabilities{Unmap: true, UnmapZeroes: false, MaxUnmapBytes: maxDiscard - maxDiscard%int64(bs),
				NonRotational: queueAttr(t, lo.path, "rotational") == 0}, b.Capabilities())
			require.False(t, b.ReadOnly())
		})
	}
}

// TestBlockReachesTheDevice checks, through the loop device's backing file, that writes,
// BLKDISCARD and BLKZEROOUT reach the device.
func TestBlockReachesTheDevice(t *testing.T) {
	const size = 16 << 20
	lo := attachLoop(t, size, 512)
	b, err := OpenBlock(lo.path, BlockOptions{})
	require.NoError(t, err)
	defer b.Close()
	var direct []bool
	b.onIO = func(d bool) { direct = append(direct, d) }

	// Data round trip, through the direct descriptor and the page-cache one.
	p := alignedBuf(t, 8<<20)
	fillPattern(p, 4<<20, 11)
	require.NoError(t, b.WriteAt(p, 4<<20, true))
	q := unalignedBuf(4096)
	fillPattern(q, 1<<20, 12)
	require.NoError(t, b.WriteAt(q, 1<<20, false))
	require.NoError(t, b.Flush())
	require.Equal(t, []bool{true, false}, direct)

	backing, err := os.ReadFile(lo.backing)
	require.NoError(t, err)
	require.True(t, bytes.Equal(p, backing[4<<20:12<<20]), "aligned write did not reach the device")
	require.True(t, bytes.Equal(q, backing[1<<20:1<<20+4096]), "unaligned write did not reach the device")
	got := alignedBuf(t, 8<<20)
	require.NoError(t, b.ReadAt(got, 4<<20))
	require.True(t, bytes.Equal(p, got))
	got = unalignedBuf(4096)
	require.NoError(t, b.ReadAt(got, 1<<20))
	require.True(t, bytes.Equal(q, got))

	// BLKDISCARD on a loop device punches a hole in the backing file.
	before := fileBlocks(t, lo.backing)
	require.NoError(t, b.Unmap(6<<20, 4<<20))
	require.NoError(t, b.Flush())
	after := fileBlocks(t, lo.backing)
	require.LessOrEqual(t, after, before-int64(4<<20)/512, "BLKDISCARD did not reach the device")

	// BLKZEROOUT: zeroes on the device, neighbours kept.
	require.NoError(t, b.WriteZeroes(4<<20+512, 1024))
	require.NoError(t, b.Flush())
	backing, err = os.ReadFile(lo.backing)
	require.NoError(t, err)
	require.Equal(t, p[:512], backing[4<<20:4<<20+512])
	require.Equal(t, make([]byte, 1024), backing[4<<20+512:4<<20+1536])
	require.Equal(t, p[1536:2<<20], backing[4<<20+1536:6<<20])
	got = make([]byte, 2048)
	require.NoError(t, b.ReadAt(got, 4<<20))
	require.Equal(t, p[:512], got[:512])
	require.Equal(t, make([]byte, 1024), got[512:1536])
	require.Equal(t, p[1536:2048], got[1536:])
}

func TestBlockExclusive(t *testing.T) {
	lo := attachLoop(t, 4<<20, 512)
	b, err := OpenBlock(lo.path, BlockOptions{})
	require.NoError(t, err)
	defer b.Close()

	_, err = OpenBlock(lo.path, BlockOptions{})
	require.ErrorIs(t, err, unix.EBUSY)
	require.ErrorContains(t, err, "device in use")

	shared, err := OpenBlock(lo.path, BlockOptions{Shared: true, ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, shared.Close())

	require.NoError(t, b.Close())
	again, err := OpenBlock(lo.path, BlockOptions{})
	require.NoError(t, err, "Close did not release the exclusive claim")
	require.NoError(t, again.Close())
}

func TestBlockRefresh(t *testing.T) {
	lo := attachLoop(t, 4<<20, 512)
	b, err := OpenBlock(lo.path, BlockOptions{})
	require.NoError(t, err)
	defer b.Close()

	require.NoError(t, os.Truncate(lo.backing, 6<<20))
	require.NoError(t, unix.IoctlSetInt(lo.fd, unix.LOOP_SET_CAPACITY, 0))
	require.Equal(t, int64(4<<20), b.Size(), "size changed before Refresh")
	size, err := b.Refresh()
	require.NoError(t, err)
	require.Equal(t, int64(6<<20), size)
	require.Equal(t, int64(6<<20), b.Size())
	p := alignedBuf(t, 4096)
	fillPattern(p, 6<<20-4096, 1)
	require.NoError(t, b.WriteAt(p, 6<<20-4096, false))
}

func TestBlockWithoutDiscard(t *testing.T) {
	lo := attachLoop(t, 4<<20, 512)
	b, err := OpenBlock(lo.path, BlockOptions{})
	require.NoError(t, err)
	defer b.Close()
	b.maxDiscard = 0 // as read from a device whose discard_max_bytes is 0
	b.nonRotational = false
	require.Equal(t, Capabilities{}, b.Capabilities())
	require.ErrorIs(t, b.Unmap(0, 4096), unix.EOPNOTSUPP)
	require.NoError(t, b.WriteZeroes(0, 4096), "BLKZEROOUT does not depend on discard")
}

// TestSysfsRotational checks queue/rotational as read for a loop device, and that a device
// number sysfs does not know (an anonymous one, as tmpfs has) gives no answer.
func TestSysfsRotational(t *testing.T) {
	lo := attachLoop(t, 1<<20, 512)
	var st unix.Stat_t
	require.NoError(t, unix.Stat(lo.path, &st))
	rot, ok := sysfsRotational(st.Rdev)
	require.True(t, ok)
	require.Equal(t, queueAttr(t, lo.path, "rotational") == 1, rot)

	_, ok = sysfsRotational(unix.Mkdev(0, 42))
	require.False(t, ok, "major 0: no block device")
	_, ok = sysfsRotational(unix.Mkdev(4095, 1048575))
	require.False(t, ok, "no such device")
}
