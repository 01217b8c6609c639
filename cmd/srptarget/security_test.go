package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/config"
)

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

// plantShared makes DIR/shared.img as another local user would plant it: owned by nobody
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
	var errs config.Errors
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

// TestServeRefusesUnsafeConfigFile: serve does not start on a configuration file others can
// write, and says how to fix it.
func TestServeRefusesUnsafeConfigFile(t *testing.T) {
	cases := []struct {
		name  string
		mode  os.FileMode
		owner int // -1: unchanged
		want  string
	}{
		{name: "group-writable", mode: 0o660, owner: -1, want: "its mode 0660 lets its group write it"},
		{name: "world-writable", mode: 0o666, owner: -1, want: "its mode 0666 lets its group and others write it"},
		{name: "another user's", mode: 0o644, owner: 65534, want: "it is owned by uid 65534, neither root nor uid 0 that srptarget runs as"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.owner >= 0 && os.Geteuid() != 0 {
				t.Skip("giving a file to another user needs root")
			}
			e := newEnv(t, e2eConfig)
			require.NoError(t, os.Chmod(e.file, c.mode))
			if c.owner >= 0 {
				require.NoError(t, os.Chown(e.file, c.owner, -1))
			}
			require.Equal(t, exitCodeError{1}, runServe(e.opts))
			_, refused := config.LoadTrusted(e.file)
			require.ErrorContains(t, refused, e.file+": refusing the configuration file: ")
			require.Equal(t, 1, e.count("configuration error", "error", refused.Error()), e.logText())
			require.Contains(t, e.logText(), c.want)
			_, err := os.Stat(filepath.Join(e.dir, "lun1.img"))
			require.ErrorIs(t, err, os.ErrNotExist, "nothing was opened")
		})
	}
}

// TestReloadRefusesUnsafeConfigFile: a reload from a file others can write fails and keeps the
// running configuration, as one that does not validate; once fixed, the reload takes it.
func TestReloadRefusesUnsafeConfigFile(t *testing.T) {
	e := newEnv(t, e2eConfig)
	e.start()
	running := e.d.cfg
	require.NoError(t, os.Chmod(e.file, 0o602))
	e.writeConfig(e2eReloadConfig) // keeps the mode
	var one *config.Error
	require.ErrorAs(t, e.reload(), &one)
	require.Equal(t, e.file+": refusing the configuration file: its mode 0602 lets every user write it, and whoever can change it can export any file of this host to any initiator; fix it with `chmod go-w "+e.file+"`", one.Error())
	require.Equal(t, 1, e.count("reload failed: the running configuration is unchanged", "errors", 1))
	require.Same(t, running, e.d.cfg)
	require.Contains(t, e.d.luns, 1)

	require.NoError(t, os.Chmod(e.file, 0o600))
	require.NoError(t, e.reload())
	require.NotContains(t, e.d.luns, 1)
	require.Contains(t, e.d.luns, 2)
	require.NoError(t, e.stop(syscall.SIGTERM))
}

// TestValidateWarnsAboutUnsafeConfigFile: what serve refuses is a warning for validate, which
// still exits 0.
func TestValidateWarnsAboutUnsafeConfigFile(t *testing.T) {
	const cfg = "listeners: [{address: 0.0.0.0, port: 5555}]\nluns: [{lun: 0, backstore: null, size: 1MiB}]\nacls: [{initiators: [\"*\"], luns: [0]}]\n"
	file := writeFile(t, "w.yaml", cfg)
	out, _, err := run(t, noDeps, "validate", "--config", file)
	require.NoError(t, err)
	require.NotContains(t, out, "warning")

	require.NoError(t, os.Chmod(file, 0o666))
	out, errOut, err := run(t, noDeps, "validate", "--config", file)
	require.NoError(t, err)
	require.Empty(t, errOut)
	require.Contains(t, out, file+": OK\n")
	require.Contains(t, out, "\nwarning: "+file+": serve refuses this file: its mode 0666 lets its group and others write it, "+
		"and whoever can change it can export any file of this host to any initiator; fix it with `chmod go-w "+file+"`\n")

	if os.Geteuid() != 0 {
		return
	}
	require.NoError(t, os.Chmod(file, 0o644))
	require.NoError(t, os.Chown(file, 65534, -1))
	out, _, err = run(t, noDeps, "validate", "--config", file)
	require.NoError(t, err)
	require.Contains(t, out, "\nwarning: "+file+": serve refuses this file: it is owned by uid 65534, neither root nor uid 0 that srptarget runs as")
}
