package testutil

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPatternDiffersBySeedAndBlock(t *testing.T) {
	a, b := Pattern(4096, 1), Pattern(4096, 2)
	require.Len(t, a, 4096)
	require.Equal(t, a, Pattern(4096, 1), "the same seed gives the same data")
	require.NotEqual(t, a, b)
	for blk := 1; blk < 8; blk++ {
		require.NotEqual(t, a[:512], a[blk*512:(blk+1)*512], "block %d repeats block 0", blk)
	}
	require.NotEqual(t, Pattern(16, 0), make([]byte, 16), "seed 0 is not all zeroes")
}

func TestWaitFor(t *testing.T) {
	n := 0
	WaitFor(t, "three polls", func() bool { n++; return n == 3 })
	require.Equal(t, 3, n)
}

func TestSenseCodes(t *testing.T) {
	fixed := []byte{0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0x00, 0, 0, 0, 0}
	for _, tc := range []struct {
		name           string
		sense          []byte
		key, asc, ascq uint8
		ok             bool
	}{
		{"fixed current", fixed, 0x05, 0x24, 0x00, true},
		{"fixed deferred", append([]byte{0xF1}, fixed[1:]...), 0x05, 0x24, 0x00, true},
		{"descriptor current", []byte{0x72, 0x06, 0x29, 0x07, 0, 0, 0, 0}, 0x06, 0x29, 0x07, true},
		{"descriptor deferred", []byte{0x73, 0x0E, 0x1D, 0x00}, 0x0E, 0x1D, 0x00, true},
		{"fixed too short", fixed[:13], 0, 0, 0, false},
		{"descriptor too short", []byte{0x72, 0x06, 0x29}, 0, 0, 0, false},
		{"unknown response code", []byte{0x7F, 0x05, 0x24, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0, false},
		{"none", nil, 0, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, a, q, ok := SenseCodes(tc.sense)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, [3]uint8{tc.key, tc.asc, tc.ascq}, [3]uint8{k, a, q})
		})
	}
}

// fatalRecorder stands for a test that RequireSense is to fail: it keeps the message.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestRequireSense(t *testing.T) {
	sense := []byte{0x72, 0x05, 0x24, 0x00, 0, 0, 0, 0}
	RequireSense(t, 0x02, sense, 0x05, 0x24, 0x00)
	for _, tc := range []struct {
		name   string
		status uint8
		sense  []byte
		want   string
	}{
		{"GOOD", 0x00, nil, "status 00h"},
		{"no sense", 0x02, nil, "no sense data"},
		{"other ASC", 0x02, []byte{0x72, 0x05, 0x20, 0x00}, "ASC/ASCQ 20h/00h, want 5h 24h/00h"},
		{"other key", 0x02, []byte{0x72, 0x06, 0x24, 0x00}, "sense key 6h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &fatalRecorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				RequireSense(r, tc.status, tc.sense, 0x05, 0x24, 0x00)
			}()
			<-done
			require.Contains(t, r.msg, tc.want)
		})
	}
}

func TestMakeLinks(t *testing.T) {
	l := MakeLinks(t)
	data, err := os.ReadFile(l.File)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 4096), data)
	st, err := os.Stat(l.File)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	for _, ln := range [][2]string{{l.Link, l.File}, {l.Dangling, l.Missing}} {
		target, err := os.Readlink(ln[0])
		require.NoError(t, err)
		require.Equal(t, ln[1], target)
		require.Equal(t, l.Dir, filepath.Dir(ln[0]))
	}
	_, err = os.Lstat(l.Missing)
	require.ErrorIs(t, err, fs.ErrNotExist)
}
