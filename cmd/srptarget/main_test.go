package main

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersionPrintsVersionAndToolchain(t *testing.T) {
	var out bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	require.NoError(t, root.Execute())
	require.Contains(t, out.String(), "srptarget "+release)
	require.Contains(t, out.String(), "built with "+runtime.Version()+" for "+runtime.GOOS+"/"+runtime.GOARCH+"\n")
}

func TestUnknownCommandFails(t *testing.T) {
	root := newRootCommand()
	root.SetArgs([]string{"no-such-command"})
	require.Error(t, root.Execute())
}
