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
	require.Equal(t, "srptarget dev ("+runtime.Version()+", "+runtime.GOOS+"/"+runtime.GOARCH+")\n", out.String())
}

func TestUnknownCommandFails(t *testing.T) {
	root := newRootCommand()
	root.SetArgs([]string{"no-such-command"})
	require.Error(t, root.Execute())
}
