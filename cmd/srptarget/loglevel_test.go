package main

import (
	"encoding/json"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/srp/srptest"
)

// TestLogLevelAtRunTime: srptarget log-level changes the level the daemon logs at while an
// initiator is logged in; its session goes on, and what the new level shows is logged from
// then on. Without a level it answers which it is; a wrong level is a usage error (exit 2).
func TestLogLevelAtRunTime(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	core, logs := observer.New(level)
	e.opts.Log, e.Logs, e.opts.Level = zap.New(core), logs, &level
	e.start()

	established := "connection established"
	tur := &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()}
	first := e.MustLogin(daemontest.RWInitiator, "", 5555)
	daemontest.Do(t, first, tur) // the unit attention of the login
	require.Zero(t, e.Count(established), "no debug line at info")

	out, errOut, err := e.ctl("log-level")
	require.NoError(t, err, errOut)
	require.Equal(t, "log level: info\n", out)

	out, errOut, err = e.ctl("log-level", "debug")
	require.NoError(t, err, errOut)
	require.Equal(t, "log level: debug (was info)\n", out)
	require.Equal(t, 1, e.Count("log level changed on the control socket", "from", "info", "to", "debug"), e.LogText())

	require.Equal(t, uint8(0), daemontest.Do(t, first, tur).Status, "the session logged in before the change goes on")
	var ss []control.SessionInfo
	e.ctlJSON(&ss, "sessions")
	require.Len(t, ss, 1)
	e.MustLogin(daemontest.ROInitiator, "198.51.100.7", 5555) // another initiator
	require.Eventually(t, func() bool { return e.Count(established) == 1 }, 5e9, 1e6, "debug lines once at debug")
	require.Equal(t, uint8(0), daemontest.Do(t, first, tur).Status)

	// --json: the answer as the socket gives it.
	out, errOut, err = e.ctl("log-level", "error", "--json")
	require.NoError(t, err, errOut)
	var rsp2 struct {
		Version int                    `json:"version"`
		OK      bool                   `json:"ok"`
		Result  control.LogLevelResult `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rsp2), out)
	require.Equal(t, control.LogLevelResult{Level: "error", Previous: "debug"}, rsp2.Result)
	require.Equal(t, 1, e.Count("log level changed on the control socket", "from", "debug", "to", "error"),
		"a change to a level that hides info is logged before it")
	require.False(t, e.opts.Log.Core().Enabled(zapcore.WarnLevel))

	_, _, err = e.ctl("log-level", "verbose")
	require.Equal(t, exitUsage, exitStatus(err))
	_, _, err = e.ctl("log-level", "info", "warn")
	require.Equal(t, exitUsage, exitStatus(err))
	require.NoError(t, e.Stop(syscall.SIGTERM))
}
