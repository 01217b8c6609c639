package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestValidateWarnsWhenItCannotLook: a backstore in a directory the validating user cannot
// enter is a warning, not an error: the daemon's user checks it when it opens it.
func TestValidateWarnsWhenItCannotLook(t *testing.T) {
	if os.Geteuid() == 0 {
		// Root can look into every directory: run this test again as nobody.
		asNobody(t, "^TestValidateWarnsWhenItCannotLook$")
		return
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

// asNobody runs the tests that match pattern in a copy of this test binary as the user and
// group nobody (65534), from a directory that user can enter, and fails with its output
// unless they pass.
func asNobody(t *testing.T, pattern string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "srpt-nobody-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	src, err := os.Open(os.Args[0])
	require.NoError(t, err)
	defer src.Close()
	bin := filepath.Join(dir, "test")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())
	cmd := exec.Command(bin, "-test.run="+pattern, "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TMPDIR="+os.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "--- PASS", string(out))
}
