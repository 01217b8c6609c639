package faultstore

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
)

func TestFaulty(t *testing.T) {
	const B = 512
	type inject struct {
		op          Op
		off, length int64
		err         error
	}
	// Each access is tried against the injections; wantErr nil means it reaches the store.
	cases := []struct {
		name    string
		inject  []inject
		op      Op
		off     int64
		length  int64
		wantErr error
	}{
		{"read inside an EIO range", []inject{{OpRead, 8 * B, 4 * B, unix.EIO}}, OpRead, 9 * B, B, unix.EIO},
		{"read overlapping the start", []inject{{OpRead, 8 * B, 4 * B, unix.EIO}}, OpRead, 6 * B, 4 * B, unix.EIO},
		{"read overlapping the end", []inject{{OpRead, 8 * B, 4 * B, unix.EIO}}, OpRead, 11 * B, 4 * B, unix.EIO},
		{"read just before", []inject{{OpRead, 8 * B, 4 * B, unix.EIO}}, OpRead, 4 * B, 4 * B, nil},
		{"read just after", []inject{{OpRead, 8 * B, 4 * B, unix.EIO}}, OpRead, 12 * B, B, nil},
		{"write is not a read", []inject{{OpRead, 0, 0, unix.EIO}}, OpWrite, 0, B, nil},
		{"write ENOSPC", []inject{{OpWrite, 0, 0, unix.ENOSPC}}, OpWrite, 100 * B, B, unix.ENOSPC},
		{"length 0 reaches the end", []inject{{OpWrite, 64 * B, 0, unix.ENOSPC}}, OpWrite, 2000 * B, B, unix.ENOSPC},
		{"combined ops", []inject{{OpRead | OpWrite, 0, B, unix.EIO}}, OpWrite, 0, B, unix.EIO},
		{"flush has no range", []inject{{OpFlush, 1 << 30, B, unix.EIO}}, OpFlush, 0, 0, unix.EIO},
		{"unmap", []inject{{OpUnmap, 0, 0, unix.EIO}}, OpUnmap, 0, 8 * B, unix.EIO},
		{"write zeroes", []inject{{OpWriteZeroes, 0, 0, unix.ENOSPC}}, OpWriteZeroes, 0, 8 * B, unix.ENOSPC},
		{"unmap is not write zeroes", []inject{{OpUnmap, 0, 0, unix.EIO}}, OpWriteZeroes, 0, 8 * B, nil},
		{"first matching injection wins", []inject{{OpRead, 0, 2 * B, unix.EIO}, {OpRead, B, 2 * B, unix.EROFS}}, OpRead, B, B, unix.EIO},
		{"OpAll", []inject{{OpAll, 0, 0, unix.EIO}}, OpWriteZeroes, 0, B, unix.EIO},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := backstore.NewMemory(1<<20, B)
			require.NoError(t, err)
			orig := testutil.Pattern(1<<20, 1)
			require.NoError(t, m.WriteAt(orig, 0, false))
			f := New(m)
			for _, in := range c.inject {
				f.Inject(in.op, in.off, in.length, in.err)
			}
			do := func() error {
				switch c.op {
				case OpRead:
					return f.ReadAt(make([]byte, c.length), c.off)
				case OpWrite:
					return f.WriteAt(make([]byte, c.length), c.off, false)
				case OpFlush:
					return f.Flush()
				case OpUnmap:
					return f.Unmap(c.off, c.length)
				case OpWriteZeroes:
					return f.WriteZeroes(c.off, c.length)
				}
				panic("unknown op")
			}
			err = do()
			got := make([]byte, 1<<20)
			require.NoError(t, m.ReadAt(got, 0))
			if c.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.wantErr)
			require.ErrorContains(t, err, "backstore faulty: "+c.op.String())
			require.True(t, bytes.Equal(orig, got), "a failed operation reached the store")

			f.Clear()
			require.NoError(t, do(), "Clear left an injection")
		})
	}
}

func TestFaultyPassesThrough(t *testing.T) {
	m, err := backstore.NewMemory(2<<20, 4096)
	require.NoError(t, err)
	f := New(m)
	require.Equal(t, int64(2<<20), f.Size())
	require.Equal(t, uint32(4096), f.LogicalBlockSize())
	require.Equal(t, m.Capabilities(), f.Capabilities())
	// A wrapped error from the store below is not disturbed.
	err = f.ReadAt(make([]byte, 4096), 2<<20)
	require.ErrorIs(t, err, backstore.ErrOutOfRange)
	require.False(t, errors.Is(err, unix.EIO))
	require.NoError(t, f.Close())
	require.ErrorIs(t, m.Flush(), backstore.ErrClosed)
}

func TestOpString(t *testing.T) {
	cases := []struct {
		op   Op
		want string
	}{
		{0, "none"},
		{OpRead, "read"},
		{OpWriteZeroes, "write zeroes"},
		{OpRead | OpFlush, "read|flush"},
		{OpAll, "read|write|flush|unmap|write zeroes"},
		{OpWrite | 0x80, "write|Op(0x80)"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, c.op.String())
	}
}

// TestAsync: the queue's requests fail as the synchronous calls do, with the same error, and
// the others reach the file.
func TestAsync(t *testing.T) {
	const B = 4096
	q, err := backstore.NewQueue(4, false)
	if errors.Is(err, backstore.ErrAsyncUnsupported) {
		t.Skipf("io_uring not available: %v", err)
	}
	require.NoError(t, err)
	defer q.Close()
	file, err := backstore.OpenFile(t.TempDir()+"/a.img", backstore.FileOptions{Size: 1 << 20, Create: true})
	require.NoError(t, err)
	a := NewAsync(file)
	defer a.Close()
	a.Inject(OpRead, 8*B, B, unix.EIO)
	a.Inject(OpFlush, 0, 0, unix.ENOSPC)
	reap := func() error {
		require.NoError(t, q.Submit())
		var got error
		for n := 0; n == 0; {
			n = q.Reap(func(c backstore.Completion) { got = c.Err })
			if n == 0 {
				require.NoError(t, q.Wait())
			}
		}
		return got
	}
	p := testutil.Pattern(B, 3)
	require.NoError(t, a.StartWrite(q, p, 8*B, false, 1))
	require.NoError(t, reap())
	back := make([]byte, B)
	require.NoError(t, a.StartRead(q, back, 8*B, 2))
	err = reap()
	require.ErrorIs(t, err, unix.EIO)
	require.Equal(t, a.ReadAt(back, 8*B).Error(), err.Error())
	require.NoError(t, a.StartRead(q, back, 9*B, 3))
	require.NoError(t, reap())
	require.NoError(t, a.StartFlush(q, 4))
	err = reap()
	require.ErrorIs(t, err, unix.ENOSPC)
	require.Equal(t, a.Flush().Error(), err.Error())
	require.NoError(t, file.ReadAt(back, 8*B))
	require.True(t, bytes.Equal(p, back))
}
