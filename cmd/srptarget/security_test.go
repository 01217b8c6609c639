package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseConfigBackstoreLinksAndSharing: validation refuses a file backstore that is a
// symbolic link, and allow_shared_file where it means nothing.
func TestParseConfigBackstoreLinksAndSharing(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.img")
	require.NoError(t, os.WriteFile(real, make([]byte, 4096), 0o600))
	link := filepath.Join(dir, "link.img")
	require.NoError(t, os.Symlink(real, link))
	dangling := filepath.Join(dir, "dangling.img")
	require.NoError(t, os.Symlink(filepath.Join(dir, "nowhere.img"), dangling))

	head := "listeners: [{address: 0.0.0.0, port: 1}]\nluns:\n  - lun: 0\n"
	cases := []struct {
		name string
		lun  string
		want []string // nil: valid
	}{
		{name: "real file", lun: "    backstore: file\n    path: " + real + "\n"},
		{name: "real file, shared allowed", lun: "    backstore: file\n    path: " + real + "\n    allow_shared_file: true\n"},
		{name: "link", lun: "    backstore: file\n    path: " + link + "\n    allow_shared_file: true\n",
			want: []string{"t.yaml:5: luns[0].path: " + link + " is a symbolic link to " + real +
				": name the real file (links are not followed, so that whoever can change one cannot point the LUN at another file)"}},
		{name: "dangling link with create", lun: "    backstore: file\n    path: " + dangling + "\n    create: true\n    size: 1MiB\n",
			want: []string{"t.yaml:5: luns[0].path: " + dangling + " is a symbolic link to " + filepath.Join(dir, "nowhere.img") +
				": name the real file (links are not followed, so that whoever can change one cannot point the LUN at another file)"}},
		{name: "memory", lun: "    backstore: memory\n    size: 1MiB\n    allow_shared_file: true\n",
			want: []string{"t.yaml:6: luns[0].allow_shared_file: allow_shared_file applies to file and block backstores only"}},
		{name: "null", lun: "    backstore: null\n    size: 1MiB\n    allow_shared_file: false\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfig("t.yaml", []byte(head+c.lun))
			if c.want == nil {
				require.NoError(t, err)
				require.Empty(t, cfg.Warnings())
				return
			}
			var errs ConfigErrors
			require.ErrorAs(t, err, &errs)
			require.Equal(t, c.want, errStrings(errs))
		})
	}
}

// TestValidateWarnsWhenItCannotLook: a backstore in a directory the validating user cannot
// enter is a warning, not an error: the daemon's user checks it when it opens it.
func TestValidateWarnsWhenItCannotLook(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root can look into every directory")
	}
	private := filepath.Join(t.TempDir(), "private")
	require.NoError(t, os.Mkdir(private, 0o700))
	defer os.Chmod(private, 0o700)
	path := filepath.Join(private, "lun.img")
	require.NoError(t, os.WriteFile(path, make([]byte, 4096), 0o600))
	require.NoError(t, os.Chmod(private, 0))
	file := writeFile(t, "v.yaml", "listeners: [{address: 0.0.0.0, port: 1}]\nluns:\n  - lun: 0\n    backstore: file\n    path: "+path+"\n")
	out, _, err := run(t, noDeps, "validate", "--config", file)
	require.NoError(t, err)
	require.Contains(t, out, "warning: "+file+":5: luns[0].path: cannot check "+path+": ")
	require.Contains(t, out, "(validate as the user srptarget runs as to check it)")
}

// sharedFileConfig is e2eConfig plus LUN 3 on DIR/shared.img, which the tests make shared.
func sharedFileConfig(extra string) string {
	cfg := strings.Replace(e2eConfig, "acls:\n", "  - lun: 3\n    backstore: file\n    path: DIR/shared.img\n"+extra+"acls:\n", 1)
	return strings.Replace(cfg, "luns: [0, 1]\n  - sources", "luns: [0, 1, 3]\n  - sources", 1)
}

// plantShared makes DIR/shared.img as the security review's attacker did: owned by nobody
// (when the test runs as root) and writable by everyone.
func plantShared(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "shared.img")
	require.NoError(t, os.WriteFile(p, make([]byte, 1<<20), 0o600))
	require.NoError(t, os.Chmod(p, 0o666))
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(p, 65534, 65534))
	}
	return p
}

// TestServeRefusesSharedBackstore: a backstore another user can write stops the start, with
// the line of its path, what was found and the fixes; allow_shared_file lets it in.
func TestServeRefusesSharedBackstore(t *testing.T) {
	e := newEnv(t, sharedFileConfig(""))
	p := plantShared(t, e.dir)
	err := runServe(e.opts)
	require.Equal(t, exitCodeError{1}, err)
	entries := e.logs.FilterMessage("configuration error").All()
	require.Len(t, entries, 1, e.logText())
	msg := entries[0].ContextMap()["error"].(string)
	require.True(t, strings.HasPrefix(msg, e.file+":19: luns[2].path: opening the backstore: backstore "+p+": "), msg)
	require.Contains(t, msg, "mode 0666 lets group and others write it")
	require.Contains(t, msg, "`chmod go-w "+p+"`")
	require.True(t, strings.HasSuffix(msg, "or accept the shared file explicitly (allow_shared_file: true on this LUN)"), msg)
	if os.Geteuid() == 0 {
		require.Contains(t, msg, "owned by uid 65534 instead of uid 0 that opens it")
		require.Contains(t, msg, "`chown 0 "+p+"`")
	}
	// The file LUN 1 would have created is gone again.
	_, err = os.Stat(filepath.Join(e.dir, "lun1.img"))
	require.ErrorIs(t, err, os.ErrNotExist)

	e = newEnv(t, sharedFileConfig("    allow_shared_file: true\n"))
	plantShared(t, e.dir)
	e.start()
	require.Equal(t, 1, e.count("LUN", "lun", 3, "path", filepath.Join(e.dir, "shared.img")))
	require.NoError(t, e.stop(syscall.SIGTERM))
}

// TestReloadRefusesSharedBackstore: a reload that adds a shared backstore fails and keeps the
// running configuration; with allow_shared_file it takes effect; withdrawing
// allow_shared_file opens the file again and is refused.
func TestReloadRefusesSharedBackstore(t *testing.T) {
	e := newEnv(t, e2eConfig)
	e.start()
	plantShared(t, e.dir)
	running := e.d.cfg

	e.writeConfig(sharedFileConfig(""))
	var errs ConfigErrors
	require.ErrorAs(t, e.reload(), &errs)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), ":19: luns[2].path: opening the backstore: ")
	require.Contains(t, errs[0].Error(), "(allow_shared_file: true on this LUN)")
	require.Same(t, running, e.d.cfg)
	require.Len(t, e.d.luns, 2)

	e.writeConfig(sharedFileConfig("    allow_shared_file: true\n"))
	require.NoError(t, e.reload())
	require.Len(t, e.d.luns, 3)

	e.writeConfig(sharedFileConfig(""))
	require.ErrorAs(t, e.reload(), &errs)
	require.Contains(t, errs[0].Error(), "(allow_shared_file: true on this LUN)")
	require.Len(t, e.d.luns, 3)
	require.True(t, e.d.luns[3].cfg.AllowSharedFile, "the running LUN 3 is unchanged")
	require.NoError(t, e.stop(syscall.SIGTERM))
}
