package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/srptarget/srptarget/backstore/rbd"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/stretchr/testify/require"
)

func TestFormatVersion(t *testing.T) {
	for _, tc := range []struct {
		commit   string
		modified bool
		want     string
	}{
		{"", false, "0.1.0"},
		{"", true, "0.1.0"},
		{"7960dc2183552d00a50b581c30acf74c5bc35fe7", false, "0.1.0+7960dc218355"},
		{"7960dc2183552d00a50b581c30acf74c5bc35fe7", true, "0.1.0+7960dc218355.modified"},
		{"abc", false, "0.1.0+abc"},
	} {
		require.Equal(t, tc.want, formatVersion("0.1.0", tc.commit, tc.modified))
	}
}

func TestVersionText(t *testing.T) {
	b := control.BuildInfo{Version: "0.1.0+7960dc218355.modified", Release: "0.1.0", Commit: "7960dc2183552d00a50b581c30acf74c5bc35fe7",
		CommitTime: "2026-12-06T18:44:00+01:00", Modified: true, GoVersion: "go1.26.8", Platform: "linux/amd64",
		Backstores: []string{"file", "block", "memory", "null", "rbd"}}
	require.Equal(t, `srptarget 0.1.0+7960dc218355.modified
commit: 7960dc2183552d00a50b581c30acf74c5bc35fe7 (2026-12-06T17:44:00Z), with uncommitted changes
built with go1.26.8 for linux/amd64
backstores: file, block, memory, null, rbd (rbd links librbd and librados)
`, versionText(b))
	b = control.BuildInfo{Version: "0.1.0", Release: "0.1.0", GoVersion: "go1.26.8", Platform: "linux/amd64", Backstores: []string{"file", "block", "memory", "null"}}
	require.Equal(t, `srptarget 0.1.0
commit: unknown (built outside a git checkout without make build)
built with go1.26.8 for linux/amd64
backstores: file, block, memory, null (no rbd: built without the rbd tag, links no Ceph library)
`, versionText(b))
}

// version and --version print the same; the release comes from the source, never "dev"; the
// backstores match the build tag.
func TestVersionCommand(t *testing.T) {
	out, _, err := run(t, noDeps, "version")
	require.NoError(t, err)
	flag, _, err := run(t, noDeps, "--version")
	require.NoError(t, err)
	require.Equal(t, out, flag)
	require.Equal(t, versionText(build), out)
	require.Regexp(t, `^srptarget `+release+`(\+[0-9a-f]{1,12}(\.modified)?)?\n`, out)
	require.Contains(t, out, runtime.Version())
	require.Equal(t, rbd.Built, hasRBD(build))
}

// The man pages name the version in their footer.
func TestGenManVersion(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	_, _, err := run(t, noDeps, "gen-man", dir)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "srptarget.1"))
	require.NoError(t, err)
	require.Contains(t, string(b), `"srptarget `+version+`"`)
}

// status --json carries the build.
func TestStatusBuild(t *testing.T) {
	b, err := json.Marshal(control.StatusInfo{Version: version, Build: build})
	require.NoError(t, err)
	require.Contains(t, string(b), `"build":{"version":"`+version+`","release":"`+release+`"`)
}
