package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func write(t *testing.T, path, text string) {
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
}

func TestSample(t *testing.T) {
	proc := t.TempDir()
	write(t, proc+"/uptime", "1234.56 789.00\n")
	write(t, proc+"/stat", "cpu  10 0 20 300 4 0 5 0 0 0\ncpu0 10 0 20 300 4 0 5 0 0 0\nintr 99 1 2\nctxt 4567\nbtime 1\n")
	write(t, proc+"/42/stat", "42 (srpt target) S 1 42 42 0 -1 4194560 100 0 0 0 17 23 0 0 20 0 9 0 5 0 0\n")
	write(t, proc+"/42/io", "rchar: 1\nwchar: 2\nsyscr: 300\nsyscw: 400\nread_bytes: 0\n")
	write(t, proc+"/42/task/42/status", "Name:\tsrptarget\nvoluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t2\n")
	write(t, proc+"/42/task/43/status", "Name:\tsrptarget\nvoluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t1\n")
	s := &sampler{proc: proc, pid: 42, buf: make([]byte, 4096)}
	var out bytes.Buffer
	s.sample(&out)
	require.Equal(t, "TGTCPU up=1234.56 cpu=10,0,20,300,4,0,5,0,0,0 ctxt=4567 dproc=17,23 dio=300,400 dcs=15,3\n", out.String())

	// the files stay open: new contents are read through the same descriptors
	require.Len(t, s.files, 6)
	write(t, proc+"/42/io", "syscr: 301\nsyscw: 402\n")
	out.Reset()
	s.sample(&out)
	require.Contains(t, out.String(), " dio=301,402 ")
	// a thread gone: its file is closed and no longer counted
	require.NoError(t, os.RemoveAll(proc+"/42/task/43"))
	out.Reset()
	s.sample(&out)
	require.Contains(t, out.String(), " dcs=10,2\n")
	require.Len(t, s.files, 5)

	// the daemon gone: its counters read 0 and the switches are left out
	out.Reset()
	s.pid = 7
	s.sample(&out)
	require.Equal(t, "TGTCPU up=1234.56 cpu=10,0,20,300,4,0,5,0,0,0 ctxt=4567 dproc=0,0 dio=0,0\n", out.String())

	// a variant daemon beside it: its counters under the prefix vd
	out.Reset()
	s.pid, s.vpid = 7, 42
	s.sample(&out)
	require.Equal(t, "TGTCPU up=1234.56 cpu=10,0,20,300,4,0,5,0,0,0 ctxt=4567 dproc=0,0 dio=0,0 vdproc=17,23 vdio=301,402 vdcs=10,2\n", out.String())

	// no daemon
	out.Reset()
	s.pid, s.vpid = 0, 0
	s.sample(&out)
	require.Equal(t, "TGTCPU up=1234.56 cpu=10,0,20,300,4,0,5,0,0,0 ctxt=4567\n", out.String())

	// no /proc/stat: no line
	require.NoError(t, os.Remove(proc+"/stat"))
	s = &sampler{proc: proc, buf: make([]byte, 4096)}
	out.Reset()
	s.sample(&out)
	require.Empty(t, out.String())
}
