package backstore

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/internal/testutil"
)

// TestOpenFileRefusesSymlinks plants links where a backstore is expected: each is refused,
// with or without AllowSharedFile, and nothing is created through a dangling one.
func TestOpenFileRefusesSymlinks(t *testing.T) {
	l := testutil.MakeLinks(t)
	victim, link, dangling, missing := l.File, l.Link, l.Dangling, l.Missing

	cases := []struct {
		name   string
		path   string
		target string
		opts   FileOptions
	}{
		{name: "link to a private file", path: link, target: victim},
		{name: "link, read-only", path: link, target: victim, opts: FileOptions{ReadOnly: true}},
		{name: "link, O_DIRECT", path: link, target: victim, opts: FileOptions{Direct: true}},
		{name: "link, allow_shared_file", path: link, target: victim, opts: FileOptions{AllowSharedFile: true}},
		{name: "dangling link with create", path: dangling, target: missing, opts: FileOptions{Create: true, Size: 1 << 20}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := OpenFile(c.path, c.opts)
			require.ErrorIs(t, err, ErrSymlink)
			require.Nil(t, f)
			require.ErrorContains(t, err, "backstore "+c.path+": is a symbolic link")
			require.ErrorContains(t, err, "points to "+c.target)
			require.ErrorContains(t, err, "name the real file instead")
		})
	}
	_, err := os.Lstat(missing)
	require.ErrorIs(t, err, fs.ErrNotExist, "a file was created through the dangling link")
	data, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 4096), data)

	// Directories on the way are followed: only the last component is checked.
	dirLink := filepath.Join(t.TempDir(), "images")
	require.NoError(t, os.Symlink(l.Dir, dirLink))
	f, err := OpenFile(filepath.Join(dirLink, filepath.Base(victim)), FileOptions{})
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// TestOpenFileRefusesSharedFiles: a file another user owns or can write is refused, with the
// owner and mode found and the fix; AllowSharedFile lets each through.
func TestOpenFileRefusesSharedFiles(t *testing.T) {
	euid := os.Geteuid()
	const other = 65534 // nobody
	cases := []struct {
		name     string
		mode     fs.FileMode
		owner    int // -1: the test's own uid
		readOnly bool
		wantErr  []string // nil: accepted
	}{
		{name: "private", mode: 0o600, owner: -1},
		{name: "readable by others", mode: 0o644, owner: -1},
		{name: "read-only for the owner", mode: 0o400, owner: -1, readOnly: true},
		{name: "group-writable", mode: 0o660, owner: -1,
			wantErr: []string{"mode 0660 lets its group write it", "`chmod go-w "}},
		{name: "world-writable", mode: 0o606, owner: -1,
			wantErr: []string{"mode 0606 lets every user write it", "`chmod go-w "}},
		{name: "group- and world-writable, opened read-only", mode: 0o666, owner: -1, readOnly: true,
			wantErr: []string{"mode 0666 lets its group and others write it"}},
		{name: "owned by another user", mode: 0o600, owner: other,
			wantErr: []string{"owned by uid 65534 instead of uid " + strconv.Itoa(euid) + " that opens it", "`chown " + strconv.Itoa(euid) + " "}},
		// What a local user plants where a backstore will be created: nobody's, mode 0666.
		{name: "another user's world-writable file", mode: 0o666, owner: other,
			wantErr: []string{"owned by uid 65534", "and its mode 0666 lets its group and others write it", "`chown ", "` and `chmod go-w "}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.owner >= 0 && euid != 0 {
				t.Skip("giving a file to another user needs root")
			}
			path := filepath.Join(t.TempDir(), "disk.img")
			require.NoError(t, os.WriteFile(path, make([]byte, 8192), 0o600))
			require.NoError(t, os.Chmod(path, c.mode))
			if c.owner >= 0 {
				require.NoError(t, os.Chown(path, c.owner, -1))
			}

			f, err := OpenFile(path, FileOptions{ReadOnly: c.readOnly})
			if c.wantErr == nil {
				require.NoError(t, err)
				require.NoError(t, f.Close())
			} else {
				require.Nil(t, f)
				var se *SharedFileError
				require.ErrorAs(t, err, &se)
				require.Equal(t, path, se.Path)
				require.False(t, se.Device)
				require.ErrorContains(t, err, "backstore "+path+": ")
				require.ErrorContains(t, err, "or accept the shared file explicitly")
				for _, want := range c.wantErr {
					require.ErrorContains(t, err, want)
				}
			}

			f, err = OpenFile(path, FileOptions{ReadOnly: c.readOnly, AllowSharedFile: true})
			require.NoError(t, err, "AllowSharedFile")
			require.Equal(t, int64(8192), f.Size())
			require.NoError(t, f.Close())
		})
	}
}

// TestOpenFileCreatesPrivately: even with umask 0, a created file is 0600 and the directories
// made for it 0700, all owned by the process.
func TestOpenFileCreatesPrivately(t *testing.T) {
	old := unix.Umask(0)
	defer unix.Umask(old)
	base := t.TempDir()
	path := filepath.Join(base, "state", "demo", "lun1.img")
	f, err := OpenFile(path, FileOptions{Create: true, Size: 1 << 20})
	require.NoError(t, err)
	require.NoError(t, f.Close())

	for p, want := range map[string]fs.FileMode{
		path:                         0o600,
		filepath.Join(base, "state"): fs.ModeDir | 0o700,
		filepath.Dir(path):           fs.ModeDir | 0o700,
	} {
		st, err := os.Lstat(p)
		require.NoError(t, err)
		require.Equal(t, want, st.Mode(), p)
		require.Equal(t, uint32(os.Geteuid()), st.Sys().(*syscall.Stat_t).Uid, p)
	}
	// And it opens again under the default checks.
	f, err = OpenFile(path, FileOptions{})
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// TestOpenBlockDeviceNodes: a symbolic link to a device node is followed (as /dev/disk/by-id
// links must be), a world-writable node is refused unless AllowSharedFile, and a group-writable
// one (root:disk 0660) is fine.
func TestOpenBlockDeviceNodes(t *testing.T) {
	lo := attachLoop(t, 1<<20, 512)
	var st unix.Stat_t
	require.NoError(t, unix.Stat(lo.path, &st))
	dir := t.TempDir()
	node := func(name string, mode uint32) string {
		p := filepath.Join(dir, name)
		if err := unix.Mknod(p, unix.S_IFBLK|mode, int(st.Rdev)); err != nil {
			t.Skipf("mknod %s: %v: cannot make device nodes here", p, err)
		}
		require.NoError(t, unix.Chmod(p, mode)) // past the umask
		return p
	}
	private := node("private", 0o660)
	shared := node("shared", 0o666)
	link := filepath.Join(dir, "by-id-link")
	require.NoError(t, os.Symlink(private, link))

	cases := []struct {
		name    string
		path    string
		opts    BlockOptions
		wantErr string
	}{
		{name: "group-writable node", path: private},
		{name: "link to a device node", path: link},
		{name: "world-writable node", path: shared, wantErr: "device node mode 0666 lets every user write the disk; fix it with `chmod o-w " + shared + "`"},
		{name: "world-writable node, read-only", path: shared, opts: BlockOptions{ReadOnly: true}, wantErr: "device node mode 0666"},
		{name: "world-writable node, allow_shared_file", path: shared, opts: BlockOptions{AllowSharedFile: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := OpenBlock(c.path, c.opts)
			if c.wantErr != "" {
				require.Nil(t, b)
				var se *SharedFileError
				require.ErrorAs(t, err, &se)
				require.True(t, se.Device)
				require.ErrorContains(t, err, c.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, int64(1<<20), b.Size())
			require.NoError(t, b.Close())
		})
	}

	// A link to something that is not a block device gets the usual refusal.
	_, err := OpenBlock(testutil.MakeLinks(t).Link, BlockOptions{})
	require.ErrorContains(t, err, "not a block device")
}
