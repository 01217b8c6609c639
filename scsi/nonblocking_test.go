package scsi

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil/faultstore"
)

// TestNonBlocking: only RAM and null logical units report that they never wait for I/O; a
// file, or a wrapper around RAM, does not.
func TestNonBlocking(t *testing.T) {
	mem := func(t *testing.T) backstore.Backstore {
		m, err := backstore.NewMemory(1<<20, 512)
		require.NoError(t, err)
		return m
	}
	tests := []struct {
		name string
		bs   func(t *testing.T) backstore.Backstore
		want bool
	}{
		{"memory", mem, true},
		{"null", func(t *testing.T) backstore.Backstore {
			n, err := backstore.NewNull(1<<20, 512)
			require.NoError(t, err)
			return n
		}, true},
		{"faulty over memory", func(t *testing.T) backstore.Backstore { return faultstore.New(mem(t)) }, false},
		{"file", func(t *testing.T) backstore.Backstore {
			f, err := backstore.OpenFile(filepath.Join(t.TempDir(), "lu.img"), backstore.FileOptions{Create: true, Size: 1 << 20})
			require.NoError(t, err)
			return f
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lu, err := NewLogicalUnit(Config{Backstore: tt.bs(t), Serial: "nb-0001"})
			require.NoError(t, err)
			t.Cleanup(func() { _ = lu.Close() })
			require.Equal(t, tt.want, lu.NonBlocking())
		})
	}
}
