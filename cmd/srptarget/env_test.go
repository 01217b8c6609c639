package main

import (
	"errors"
	"testing"
	"time"

	"github.com/srptarget/srptarget/internal/daemon"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
)

// env is a daemon (daemon.Serve) on an in-memory fabric (daemontest.Env), driven by signals
// sent through a channel, with its logs observed.
type env struct {
	*daemontest.Env
	opts daemon.Options
}

// newEnv writes config (with DIR replaced by a temporary directory) and prepares the daemon;
// start runs it.
func newEnv(t *testing.T, config string) *env {
	t.Helper()
	e := &env{Env: daemontest.New(t, config)}
	e.opts = daemon.Options{
		Flags:  daemon.Flags{ConfigFile: e.File, Process: daemon.Process{ShutdownTimeout: 10 * time.Second}},
		Log:    e.Log,
		Build:  build,
		Listen: e.Listen,
		Devices: func() ([]daemon.Device, error) {
			return nil, errors.New("no devices in tests")
		},
		Interfaces:  func() ([]daemon.HostAddr, error) { return nil, nil },
		Signals:     e.Sigs,
		Exit:        func(code int) { e.Exits <- code },
		AfterReload: func(err error) { e.Reloads <- err },
	}
	return e
}

// start runs the daemon and waits until it serves.
func (e *env) start() {
	e.T.Helper()
	ready := make(chan struct{}, 1)
	e.opts.Ready = func() { ready <- struct{}{} }
	daemontest.Start(e.Env, ready, func() error { return daemon.Serve(e.opts) })
}
