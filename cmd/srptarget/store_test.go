package main

import (
	"path/filepath"
	"sync"
	"testing"

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
