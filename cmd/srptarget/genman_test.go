package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/config"
)

// gen-man writes a page per visible command, named as man(1) finds them, and none for
// itself (it is hidden).
func TestGenMan(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1767225600") // 2026-01-01: the date in the pages
	dir := filepath.Join(t.TempDir(), "man1")
	_, _, err := run(t, noDeps, "gen-man", dir)
	require.NoError(t, err)
	for _, page := range []string{"srptarget.1", "srptarget-serve.1", "srptarget-validate.1", "srptarget-login-line.1", "srptarget-devices.1", "srptarget-version.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		require.NoError(t, err, page)
		require.Contains(t, string(b), `.TH "SRPTARGET`, page)
		require.Contains(t, string(b), "Jan 2026", page)
	}
	serve, err := os.ReadFile(filepath.Join(dir, "srptarget-serve.1"))
	require.NoError(t, err)
	require.Contains(t, string(serve), "/etc/srptarget/srptarget.yaml", "the default of --config")
	_, err = os.Stat(filepath.Join(dir, "srptarget-gen-man.1"))
	require.ErrorIs(t, err, os.ErrNotExist)

	_, _, err = run(t, noDeps, "gen-man")
	require.Error(t, err, "gen-man needs DIR")
}

// The example of srptarget.yaml(5) is a valid configuration.
func TestConfigManPageExample(t *testing.T) {
	page, err := os.ReadFile("../../man/srptarget.yaml.5")
	require.NoError(t, err)
	s := string(page)
	start := strings.Index(s, ".EX\n")
	end := strings.Index(s, ".EE\n")
	require.True(t, start >= 0 && end > start, "the page has an .EX example")
	dir := t.TempDir()
	yaml := strings.ReplaceAll(s[start+4:end], "/var/lib/srptarget", dir)
	_, err = config.Parse("srptarget.yaml(5)", []byte(yaml))
	require.NoError(t, err)
}
