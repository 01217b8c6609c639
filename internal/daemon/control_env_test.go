package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/control"
)

// newControlEnv is newEnv with the control socket in a directory that does not exist yet.
func newControlEnv(t *testing.T, config string) *env {
	t.Helper()
	e := newEnv(t, config)
	e.opts.ControlPath = e.ControlSocket()
	return e
}

// ctlJSON asks e's daemon on its control socket (a command without arguments) and decodes
// the answer's result into v. The commands' printing is cmd/srptarget's to test.
func (e *env) ctlJSON(v any, command string) {
	e.T.Helper()
	require.NoError(e.T, e.ctlErr(v, command))
}

// ctlErr is ctlJSON, returning the request's error.
func (e *env) ctlErr(v any, command string) error {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := control.Client{Path: e.opts.ControlPath}.Do(ctx, control.Request{Command: command}, v)
	return err
}
