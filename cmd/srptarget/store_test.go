package main

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/scsi"
)

// TestSharedStoreNonBlocking: the daemon's wrapper keeps a RAM or null store non-blocking, so
// that the logical unit over it runs commands on the channel goroutine (no worker hand-off),
// and a file store blocking.
func TestSharedStoreNonBlocking(t *testing.T) {
	dir := t.TempDir()
	lun := func(n int) *int { return &n }
	for _, tc := range []struct {
		lun  LUNConfig
		want bool
	}{
		{LUNConfig{LUN: lun(0), Backstore: "memory", Size: 1 << 20}, true},
		{LUNConfig{LUN: lun(1), Backstore: "null", Size: 1 << 20}, true},
		{LUNConfig{LUN: lun(2), Backstore: "file", Path: filepath.Join(dir, "lun.img"), Size: 1 << 20, Create: true}, false},
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
