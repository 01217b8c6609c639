package main

import (
	"io"
	"strings"
	"testing"

	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon"
	"github.com/stretchr/testify/require"
)

func TestServeProfilingFlags(t *testing.T) {
	defaults := serveFlags{logFormat: "auto", logLevel: "info", Flags: daemon.Flags{ConfigFile: "c.yaml",
		Process: daemon.Process{ShutdownTimeout: daemon.DefaultShutdownTimeout, ControlPath: control.DefaultSocket}}}
	with := func(change func(*serveFlags)) serveFlags {
		f := defaults
		change(&f)
		return f
	}
	tests := []struct {
		name    string
		args    []string
		want    serveFlags
		wantErr string
	}{
		{name: "defaults: no profile, no endpoint", args: []string{"--config", "c.yaml"}, want: defaults},
		{
			name: "cpuprofile from start-up",
			args: []string{"--config", "c.yaml", "--cpuprofile", "/tmp/cpu.pprof"},
			want: with(func(f *serveFlags) { f.CPUProfile = "/tmp/cpu.pprof" }),
		},
		{
			name: "cpuprofile on SIGUSR1 and pprof",
			args: []string{"--config=c.yaml", "--cpuprofile=/tmp/cpu.pprof", "--cpuprofile-wait", "--pprof", "127.0.0.1:6060"},
			want: with(func(f *serveFlags) {
				f.CPUProfile, f.CPUProfileWait, f.PprofAddr = "/tmp/cpu.pprof", true, "127.0.0.1:6060"
			}),
		},
		{name: "cpuprofile-wait alone", args: []string{"--config", "c.yaml", "--cpuprofile-wait"}, wantErr: "--cpuprofile-wait needs --cpuprofile FILE"},
		{name: "pprof without address", args: []string{"--config", "c.yaml", "--pprof"}, wantErr: "flag needs an argument: --pprof"},
		{name: "cpuprofile without file", args: []string{"--config", "c.yaml", "--cpuprofile"}, wantErr: "flag needs an argument: --cpuprofile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *serveFlags
			cmd := newServeCommandWith(func(f serveFlags) error { got = &f; return nil })
			cmd.SetArgs(tt.args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				require.Nil(t, got, "the daemon must not run")
				return
			}
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Equal(t, tt.want, *got)
		})
	}
}

func TestServeMetricsFlag(t *testing.T) {
	var got serveFlags
	cmd := newServeCommandWith(func(f serveFlags) error { got = f; return nil })
	cmd.SetArgs([]string{"--config", "c.yaml", "--metrics", "127.0.0.1:9464"})
	require.NoError(t, cmd.Execute())
	require.Equal(t, "127.0.0.1:9464", got.MetricsAddr)
	require.True(t, strings.Contains(cmd.Long, "docs/metrics.md"))
}
