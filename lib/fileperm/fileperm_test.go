package fileperm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWritable(t *testing.T) {
	for _, tc := range []struct {
		mode      uint32
		what, fix string
	}{
		{0o600, "", ""},
		{0o644, "", ""},
		{0o2755, "", ""},
		{0o664, "its mode 0664 lets its group write it", "`chmod go-w /f`"},
		{0o646, "its mode 0646 lets every user write it", "`chmod go-w /f`"},
		{0o666, "its mode 0666 lets its group and others write it", "`chmod go-w /f`"},
		{0o1777, "its mode 1777 lets its group and others write it", "`chmod go-w /f`"},
		{0o100622, "its mode 0622 lets its group and others write it", "`chmod go-w /f`"}, // st_mode's file type is left out
	} {
		what, fix := Writable("/f", tc.mode)
		require.Equal(t, tc.what, what, "%o", tc.mode)
		require.Equal(t, tc.fix, fix, "%o", tc.mode)
	}
}

func TestProblem(t *testing.T) {
	for _, tc := range []struct {
		uid, mode uint32
		what, fix string
	}{
		{0, 0o600, "", ""},
		{998, 0o640, "", ""}, // the daemon's own
		{1000, 0o600, "it is owned by uid 1000, neither root nor uid 998 that srptarget runs as", "`chown root /f`"},
		{0, 0o620, "its mode 0620 lets its group write it", "`chmod go-w /f`"},
		{1000, 0o666, "it is owned by uid 1000, neither root nor uid 998 that srptarget runs as and its mode 0666 lets its group and others write it",
			"`chown root /f` and `chmod go-w /f`"},
	} {
		what, fix := Problem("/f", tc.uid, tc.mode, 998, "root")
		require.Equal(t, tc.what, what, "uid %d mode %o", tc.uid, tc.mode)
		require.Equal(t, tc.fix, fix, "uid %d mode %o", tc.uid, tc.mode)
	}
}
