package daemon

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/scsi"
)

// TestSharedStoreNonBlocking: the daemon's wrapper keeps a RAM or null store non-blocking, so
// that the logical unit over it runs commands on the channel goroutine (no worker hand-off),
// and a file store blocking.
func TestSharedStoreNonBlocking(t *testing.T) {
	dir := t.TempDir()
	lun := func(n int) *int { return &n }
	for _, tc := range []struct {
		lun  config.LUN
		want bool
	}{
		{config.LUN{LUN: lun(0), Backstore: "memory", Size: 1 << 20}, true},
		{config.LUN{LUN: lun(1), Backstore: "null", Size: 1 << 20}, true},
		{config.LUN{LUN: lun(2), Backstore: "file", Path: filepath.Join(dir, "lun.img"), Size: 1 << 20, Create: true}, false},
	} {
		t.Run(string(tc.lun.Backstore), func(t *testing.T) {
			var closers sync.WaitGroup
			s, err := openStore(&tc.lun, zap.NewNop(), &closers)
			require.NoError(t, err)
			var bs backstore.Backstore = s
			nb, ok := bs.(backstore.NonBlocking)
			require.True(t, ok, "sharedStore implements backstore.NonBlocking")
			require.Equal(t, tc.want, nb.NonBlocking())
			s.acquire()
			lu, err := scsi.NewLogicalUnit(scsi.Config{Backstore: s, Vendor: "SRPT", Product: "test", Revision: "0001", Serial: "t1"})
			require.NoError(t, err)
			require.Equal(t, tc.want, lu.NonBlocking())
			require.NoError(t, lu.Close())
			closers.Wait()
		})
	}
}

// TestSharedStoreMapping checks that the daemon's store wrapper passes the backstore's map on to
// GET LBA STATUS (a wrapper that hid it would report every block of a file mapped, holes and
// all), answers "mapped" for a store without a map, and refuses once closed.
func TestSharedStoreMapping(t *testing.T) {
	var closers sync.WaitGroup
	open := func(l *config.LUN) *sharedStore {
		s, err := openStore(l, zap.NewNop(), &closers)
		require.NoError(t, err)
		s.acquire()
		return s
	}

	lun := func(n int) *int { return &n }
	mem := open(&config.LUN{LUN: lun(0), Backstore: "memory", Size: 4 << 20, BlockSize: 512})
	require.NoError(t, mem.WriteAt(make([]byte, 512), 1<<20, false))
	for _, c := range []struct {
		off    int64
		mapped bool
		end    int64
	}{{0, false, 1 << 20}, {1 << 20, true, 2 << 20}, {2 << 20, false, 4 << 20}} {
		mapped, end, err := mem.Mapping(c.off, 4<<20)
		require.NoError(t, err)
		require.Equal(t, c.mapped, mapped, "off %d", c.off)
		require.Equal(t, c.end, end, "off %d", c.off)
	}

	file := open(&config.LUN{LUN: lun(1), Backstore: "file", Path: filepath.Join(t.TempDir(), "f.img"), Create: true, Size: 1 << 20, BlockSize: 4096})
	mapped, end, err := file.Mapping(0, 1<<20)
	require.NoError(t, err)
	require.Equal(t, []any{false, int64(1 << 20)}, []any{mapped, end}, "a new sparse file is one hole")

	null := open(&config.LUN{LUN: lun(2), Backstore: "null", Size: 1 << 20, BlockSize: 512})
	mapped, end, err = null.Mapping(512, 1<<30)
	require.NoError(t, err)
	require.Equal(t, []any{true, int64(1 << 20)}, []any{mapped, end})
	_, _, err = null.Mapping(1<<20, 512)
	require.ErrorIs(t, err, backstore.ErrOutOfRange)

	for _, s := range []*sharedStore{mem, file, null} {
		require.NoError(t, s.Close())
	}
	closers.Wait()
	_, _, err = mem.Mapping(0, 512)
	require.ErrorIs(t, err, backstore.ErrClosed)
}

// TestStoreKeyOfRBD: an rbd LUN's backstore is named by its image.
func TestStoreKeyOfRBD(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte("listeners: [{address: 0.0.0.0, port: 1}]\nluns:\n  - lun: 0\n    backstore: rbd\n    rbd: {image: disk0}\n"))
	require.NoError(t, err)
	require.Equal(t, "rbd image rbd/disk0", storeKeyOf(&cfg.LUNs[0]).String())
}

// TestSharedStoreAsync: the logical unit over a file LUN's shared store can start its
// commands on a poll group's io_uring (the wrapper passes the file's backstore.AsyncStore
// on), over a RAM store cannot; a read in flight keeps the file open after the last logical
// unit closed the store, and reads the file's data; a start after that is refused.
func TestSharedStoreAsync(t *testing.T) {
	if err := backstore.ProbeAsync(); err != nil {
		t.Skipf("io_uring does not work here: %v", err)
	}
	dir := t.TempDir()
	lun := func(n int) *int { return &n }
	var closers sync.WaitGroup
	open := func(l config.LUN) (*sharedStore, *scsi.LogicalUnit) {
		s, err := openStore(&l, zap.NewNop(), &closers)
		require.NoError(t, err)
		s.acquire()
		lu, err := scsi.NewLogicalUnit(scsi.Config{Backstore: s.forLU(), Vendor: "SRPT", Product: "test", Revision: "0001", Serial: "t1"})
		require.NoError(t, err)
		return s, lu
	}
	_, mem := open(config.LUN{LUN: lun(0), Backstore: "memory", Size: 1 << 20})
	require.False(t, mem.Async())
	require.NoError(t, mem.Close())

	path := filepath.Join(dir, "lun.img")
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i*13 + i>>9)
	}
	require.NoError(t, os.WriteFile(path, data, 0o600))
	s, lu := open(config.LUN{LUN: lun(1), Backstore: "file", Path: path})
	require.True(t, lu.Async())
	as, ok := s.forLU().(backstore.AsyncStore)
	require.True(t, ok)
	q, err := backstore.NewQueue(4, false)
	require.NoError(t, err)
	defer q.Close()
	buf := make([]byte, 8192)
	require.NoError(t, as.StartRead(q, buf, 4096, 1))
	require.NoError(t, q.Submit())
	require.NoError(t, lu.Close()) // the last reference: the store closes on a goroutine
	closed := make(chan struct{})
	go func() { closers.Wait(); close(closed) }()
	require.Eventually(t, func() bool { s.mu.RLock(); defer s.mu.RUnlock(); return s.closed }, 5*time.Second, time.Millisecond)
	err = as.StartRead(q, buf, 0, 2)
	require.ErrorIs(t, err, backstore.ErrClosed, "a start after the store closed")
	var got []backstore.Completion
	for len(got) == 0 {
		require.NoError(t, q.Wait())
		q.Reap(func(c backstore.Completion) { got = append(got, c) })
	}
	require.Equal(t, []backstore.Completion{{Tag: 1}}, got)
	require.Equal(t, data[4096:4096+8192], buf)
	<-closed
}
