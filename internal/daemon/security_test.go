package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/stretchr/testify/require"
)

// sharedFileConfig is e2eConfig plus LUN 3 on DIR/shared.img, which the tests make shared.
func sharedFileConfig(extra string) string {
	cfg := strings.Replace(daemontest.E2EConfig, "acls:\n", "  - lun: 3\n    backstore: file\n    path: DIR/shared.img\n"+extra+"acls:\n", 1)
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
	p := plantShared(t, e.Dir)
	err := runServe(e.opts)
	require.Equal(t, ExitError{1}, err)
	entries := e.Logs.FilterMessage("configuration error").All()
	require.Len(t, entries, 1, e.LogText())
	msg := entries[0].ContextMap()["error"].(string)
	require.True(t, strings.HasPrefix(msg, e.File+":19: luns[2].path: opening the backstore: backstore "+p+": "), msg)
	require.Contains(t, msg, "mode 0666 lets its group and others write it")
	require.Contains(t, msg, "`chmod go-w "+p+"`")
	require.True(t, strings.HasSuffix(msg, "or accept the shared file explicitly (allow_shared_file: true on this LUN)"), msg)
	if os.Geteuid() == 0 {
		require.Contains(t, msg, "owned by uid 65534 instead of uid 0 that opens it")
		require.Contains(t, msg, "`chown 0 "+p+"`")
	}
	// The file LUN 1 would have created is gone again.
	_, err = os.Stat(filepath.Join(e.Dir, "lun1.img"))
	require.ErrorIs(t, err, os.ErrNotExist)

	e = newEnv(t, sharedFileConfig("    allow_shared_file: true\n"))
	plantShared(t, e.Dir)
	e.start()
	require.Equal(t, 1, e.Count("LUN", "lun", 3, "path", filepath.Join(e.Dir, "shared.img")))
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// TestReloadRefusesSharedBackstore: a reload that adds a shared backstore fails and keeps the
// running configuration; with allow_shared_file it takes effect; withdrawing
// allow_shared_file opens the file again and is refused.
func TestReloadRefusesSharedBackstore(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	e.start()
	plantShared(t, e.Dir)
	running := e.d.cfg

	e.WriteConfig(sharedFileConfig(""))
	var errs config.Errors
	require.ErrorAs(t, e.Reload(), &errs)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), ":19: luns[2].path: opening the backstore: ")
	require.Contains(t, errs[0].Error(), "(allow_shared_file: true on this LUN)")
	require.Same(t, running, e.d.cfg)
	require.Len(t, e.d.luns, 2)

	e.WriteConfig(sharedFileConfig("    allow_shared_file: true\n"))
	require.NoError(t, e.Reload())
	require.Len(t, e.d.luns, 3)

	e.WriteConfig(sharedFileConfig(""))
	require.ErrorAs(t, e.Reload(), &errs)
	require.Contains(t, errs[0].Error(), "(allow_shared_file: true on this LUN)")
	require.Len(t, e.d.luns, 3)
	require.True(t, e.d.luns[3].cfg.AllowSharedFile, "the running LUN 3 is unchanged")
	require.NoError(t, e.Stop(syscall.SIGTERM))
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
			e := newEnv(t, daemontest.E2EConfig)
			require.NoError(t, os.Chmod(e.File, c.mode))
			if c.owner >= 0 {
				require.NoError(t, os.Chown(e.File, c.owner, -1))
			}
			require.Equal(t, ExitError{1}, runServe(e.opts))
			_, refused := config.LoadTrusted(e.File)
			require.ErrorContains(t, refused, e.File+": refusing the configuration file: ")
			require.Equal(t, 1, e.Count("configuration error", "error", refused.Error()), e.LogText())
			require.Contains(t, e.LogText(), c.want)
			_, err := os.Stat(filepath.Join(e.Dir, "lun1.img"))
			require.ErrorIs(t, err, os.ErrNotExist, "nothing was opened")
		})
	}
}

// TestReloadRefusesUnsafeConfigFile: a reload from a file others can write fails and keeps the
// running configuration, as one that does not validate; once fixed, the reload takes it.
func TestReloadRefusesUnsafeConfigFile(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	e.start()
	running := e.d.cfg
	require.NoError(t, os.Chmod(e.File, 0o602))
	e.WriteConfig(daemontest.E2EReloadConfig) // keeps the mode
	var one *config.Error
	require.ErrorAs(t, e.Reload(), &one)
	require.Equal(t, e.File+": refusing the configuration file: its mode 0602 lets every user write it, and whoever can change it can export any file of this host to any initiator; fix it with `chmod go-w "+e.File+"`", one.Error())
	require.Equal(t, 1, e.Count("reload failed: the running configuration is unchanged", "errors", 1))
	require.Same(t, running, e.d.cfg)
	require.Contains(t, e.d.luns, 1)

	require.NoError(t, os.Chmod(e.File, 0o600))
	require.NoError(t, e.Reload())
	require.NotContains(t, e.d.luns, 1)
	require.Contains(t, e.d.luns, 2)
	require.NoError(t, e.Stop(syscall.SIGTERM))
}
