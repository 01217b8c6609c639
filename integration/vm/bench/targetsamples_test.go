package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sampleLine is a TGTCPU line at uptime up with busy (user) and idle ticks and the daemon's
// utime; the host's context switches, the daemon's system calls and its voluntary and
// involuntary switches are multiples of the utime.
func sampleLine(up float64, busy, idle, dutime uint64) string {
	return fmt.Sprintf("TGTCPU up=%.3f cpu=%d,0,0,%d,0,0,0,0,0,0 ctxt=%d dproc=%d,0 dio=%d,%d dcs=%d,%d",
		up, busy, idle, dutime*3, dutime, dutime*10, dutime*20, dutime*2, dutime)
}

func TestParseTargetSample(t *testing.T) {
	s, err := ParseTargetSample(sampleLine(12.5, 300, 100, 40))
	require.NoError(t, err)
	require.Equal(t, 12.5, s.Up)
	require.Equal(t, []uint64{300, 0, 0, 100, 0, 0, 0, 0, 0, 0}, s.CPU)
	require.Equal(t, [2]uint64{40, 0}, s.Daemon)
	require.Equal(t, [2]uint64{400, 800}, s.IO)
	require.Equal(t, uint64(120), s.Ctxt)
	require.True(t, s.HasCS)
	require.Equal(t, [2]uint64{80, 40}, s.CS)
	require.False(t, s.HasV)
	s, err = ParseTargetSample("TGTCPU up=1 cpu=1,2,3,4 ctxt=5 dproc=1,2 dio=3,4")
	require.NoError(t, err)
	require.False(t, s.HasCS, "a line of an older target script")
	s, err = ParseTargetSample(sampleLine(12.5, 300, 100, 40) + " vdproc=7,8 vdio=9,10 vdcs=11,12")
	require.NoError(t, err)
	require.True(t, s.HasV)
	require.Equal(t, variantSample{Daemon: [2]uint64{7, 8}, IO: [2]uint64{9, 10}, CS: [2]uint64{11, 12}, HasCS: true}, s.V)
	_, err = ParseTargetSample("TGTCPU up=1")
	require.ErrorContains(t, err, "no up= or cpu=")
	_, err = ParseTargetSample("SRPTVM-SYNC uptime 3")
	require.ErrorIs(t, err, errNotBench)
}

func TestApplyTargetSamples(t *testing.T) {
	// samples every 0.5 s from 0 to 20 s: 80 busy and 20 idle ticks per second, the daemon
	// 50 ticks per second
	var samples []TargetSample
	for i := 0; i <= 40; i++ {
		up := float64(i) / 2
		s, err := ParseTargetSample(sampleLine(up, uint64(80*up), uint64(20*up), uint64(50*up)))
		require.NoError(t, err)
		samples = append(samples, s)
	}
	srpt, err := ParseRun(line("randread-4k-qd32", false)) // 1024 IOPS
	require.NoError(t, err)
	srpt.Up0, srpt.Up1 = 3.2, 9.3
	lio := srpt
	lio.Target = "lio"
	late := srpt
	late.Up0, late.Up1 = 19.6, 26
	variant := srpt
	variant.Target = "srpt-mem-base"
	runs := []Run{srpt, lio, late, variant}
	p := Params{Runtime: 5, Ramp: 1, TargetHost: true}
	require.Equal(t, 1, ApplyTargetSamples(runs, samples, p))
	require.False(t, runs[3].HasDaemonIO, "the variant's runs: not the first daemon's counters")
	require.InDelta(t, 0.8/1024*1e6, Derive(runs[3], p).GuestCPUPerIO, 1e-6)

	// measured part 4.2-9.3: samples 4.5 to 9.0, 4.5 s
	require.Equal(t, 4.5, runs[0].IOWindow)
	require.Equal(t, [2]float64{4.5, 9}, [2]float64{runs[0].Up0, runs[0].Up1})
	d := Derive(runs[0], p)
	require.InDelta(t, 0.8/1024*1e6, d.GuestCPUPerIO, 1e-6)
	require.InDelta(t, 0.5/1024*1e6, d.DaemonCPUPerIO, 1e-6)
	require.InDelta(t, 20, d.GuestIdlePct, 1e-9)
	require.InDelta(t, 10*50/1024.0, d.DaemonReadsPerIO, 1e-9)
	require.InDelta(t, 150/1024.0, d.CtxtPerIO, 1e-9, "the target host's context switches")
	require.True(t, math.IsNaN(d.IPIPerIO), "no IPI counters on the target")
	require.InDelta(t, 100/1024.0, d.DaemonVolPerIO, 1e-9)
	require.InDelta(t, 50/1024.0, d.DaemonInvolPerIO, 1e-9)

	d = Derive(runs[1], p)
	require.InDelta(t, 0.8/1024*1e6, d.GuestCPUPerIO, 1e-6)
	require.Zero(t, d.DaemonCPUPerIO, "LIO: no daemon")
	require.False(t, runs[1].HasDaemonIO)
	require.True(t, math.IsNaN(d.DaemonVolPerIO), "LIO: no daemon")
	require.InDelta(t, 150/1024.0, d.CtxtPerIO, 1e-9)

	// 20.0 is the only sample inside 20.6-26: no figures
	require.True(t, math.IsNaN(runs[2].IOWindow))
	d = Derive(runs[2], p)
	require.True(t, math.IsNaN(d.GuestCPUPerIO))
	require.Equal(t, 1024.0, runs[2].IOPS, "the fio figures stay")

	// with the variant daemon's counters (10 utime ticks, 14 read() calls and 6 sleeps per
	// second): they go to its runs, and the first daemon's to srpt-mem's
	for i := range samples {
		samples[i].V = variantSample{Daemon: [2]uint64{uint64(10 * samples[i].Up), 0},
			IO: [2]uint64{uint64(14 * samples[i].Up), 0}, CS: [2]uint64{uint64(6 * samples[i].Up), 0}, HasCS: true}
		samples[i].HasV = true
	}
	runs = []Run{srpt, variant}
	require.Zero(t, ApplyTargetSamples(runs, samples, p))
	d = Derive(runs[1], p)
	require.InDelta(t, 0.1/1024*1e6, d.DaemonCPUPerIO, 1e-6)
	require.InDelta(t, 14/1024.0, d.DaemonReadsPerIO, 1e-9)
	require.InDelta(t, 6/1024.0, d.DaemonVolPerIO, 1e-9)
	require.InDelta(t, 0.5/1024*1e6, Derive(runs[0], p).DaemonCPUPerIO, 1e-6)
}

func TestRunTargetSamples(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw.txt")
	info := filepath.Join(dir, "info.txt")
	samples := filepath.Join(dir, "target-samples.txt")
	srpt := line("randread-4k-qd1", false) // 1024 IOPS, 31.25 µs mean, p99 99 µs
	lio := strings.Replace(strings.Replace(srpt, "target=srpt-mem", "target=lio", 1), ";31.25;", ";25.00;", 1)
	require.NoError(t, os.WriteFile(raw, []byte(srpt+"\n"+lio+"\n"), 0o644))
	require.NoError(t, os.WriteFile(info, []byte("BENCHINFO guest_cpu=QEMU Virtual CPU version 2.5+ x 2\n"+
		"BENCHINFO runtime=5 ramp=1 rounds=1 ch_counts=1 size_mib=256\n"), 0o644))
	var b strings.Builder
	for i := 0; i <= 40; i++ { // the runs' window is 100-106 (head)
		up := 95 + float64(i)/2
		fmt.Fprintln(&b, sampleLine(up, uint64(80*up), uint64(20*up), uint64(50*up)))
	}
	require.NoError(t, os.WriteFile(samples, []byte(b.String()), 0o644))
	var out bytes.Buffer
	require.NoError(t, run(options{raw: raw, info: info, out: dir, title: "title", terminal: "set terminal png", samples: samples}, &out))
	require.Contains(t, out.String(), "| job | ch_count | target host CPU µs/I/O: LIO | srptarget memory | daemon CPU µs/I/O: memory | target host idle %: LIO | memory |")
	require.Contains(t, out.String(), "| randread-4k-qd1 | 1 | 781 | 781 | 488 | 20.0 | 20.0 |")
	require.Contains(t, out.String(), "| job | ch_count | target host context switches/I/O: LIO | srptarget memory | "+
		"daemon wake-ups/I/O: memory | daemon preemptions/I/O: memory | daemon read()/I/O: memory | daemon write()/I/O: memory |")
	// per second: 150 host switches, 100 voluntary and 50 involuntary daemon switches, 500
	// reads and 1000 writes, for 1024 I/Os
	require.Contains(t, out.String(), "| randread-4k-qd1 | 1 | 0.15 | 0.15 | 0.10 | 0.05 | 0.49 | 0.98 |")
	csvData, err := os.ReadFile(filepath.Join(dir, "two-host-summary.csv"))
	require.NoError(t, err)
	c := string(csvData)
	require.True(t, strings.HasPrefix(c, "job,ch_count,target,median,ratio\n"), c)
	// latency: LIO / srptarget, above 1 better for srptarget
	require.Contains(t, c, "randread-4k-qd1-mean,1,lio,25.000,\n")
	require.Contains(t, c, "randread-4k-qd1-mean,1,srpt-mem,31.250,0.800\n")
	require.Contains(t, c, "randread-4k-qd1/target-cpu-us-per-io,1,srpt-mem,781.250,1.000\n")
	require.Contains(t, c, "randread-4k-qd1/daemon-cpu-us-per-io,1,srpt-mem,488.281,\n")
	require.NotContains(t, c, "daemon-cpu-us-per-io,1,lio")
	require.Contains(t, c, "randread-4k-qd1/ctxt-per-io,1,srpt-mem,0.146,1.000\n")
	require.Contains(t, c, "randread-4k-qd1/daemon-vcs-per-io,1,srpt-mem,0.098,\n")
	require.Contains(t, c, "randread-4k-qd1/daemon-writes-per-io,1,srpt-mem,0.977,\n")
	require.NotContains(t, c, "daemon-vcs-per-io,1,lio")
	gp, err := os.ReadFile(filepath.Join(dir, "chart.gp"))
	require.NoError(t, err)
	require.Contains(t, string(gp), "target host CPU per I/O")
}

func TestApplyHostSamples(t *testing.T) {
	p := Params{Runtime: 5, Ramp: 1}
	var samples []TargetSample
	for i := 0; i <= 40; i++ { // 95-115 s: user +300/s, idle +100/s, one tick in softirq
		up := 95 + float64(i)/2
		s, err := ParseHostSample(fmt.Sprintf("HOSTCPU up=%.1f cpu=%d,0,0,%d,0,0,%d,0", up, uint64(300*up), uint64(100*up), i))
		require.NoError(t, err)
		samples = append(samples, s)
	}
	_, err := ParseHostSample(sampleLine(1, 1, 1, 1))
	require.ErrorIs(t, err, errNotBench, "a target sample is not a host sample")
	runs := []Run{
		{Up0: 100, Up1: 106, IOPS: 1},   // measured part 101-106
		{Up0: 114, Up1: 120, IOPS: 1},   // 115-120: one sample, none
		{Up0: 200, Up1: 206, IOPS: 100}, // no sample
	}
	require.Equal(t, 2, ApplyHostSamples(runs, samples, p))
	require.Equal(t, samples[12].CPU, runs[0].HostCPU0, "101.0 s")
	require.Equal(t, samples[22].CPU, runs[0].HostCPU1, "106.0 s")
	require.Nil(t, runs[1].HostCPU0)
	require.Nil(t, runs[2].HostCPU0)
	d := Derive(runs[0], p)
	require.InDelta(t, 100*(1500+10)/2010.0, d.HostBusyPct, 1e-9, "busy = user + softirq over the 5 s")
	require.True(t, math.IsNaN(Derive(runs[1], p).HostBusyPct))
}

func TestRunHostSamples(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw.txt")
	info := filepath.Join(dir, "info.txt")
	samples := filepath.Join(dir, "target-samples.txt")
	hostSamples := filepath.Join(dir, "host-samples.txt")
	srpt := line("randread-4k-qd1", false)
	lio := strings.Replace(srpt, "target=srpt-mem", "target=lio", 1)
	require.NoError(t, os.WriteFile(raw, []byte(srpt+"\n"+lio+"\n"), 0o644))
	require.NoError(t, os.WriteFile(info, []byte("BENCHINFO guest_cpu=QEMU Virtual CPU version 2.5+ x 2\n"+
		"BENCHINFO runtime=5 ramp=1 rounds=1 ch_counts=1 size_mib=256\n"), 0o644))
	var tb, hb strings.Builder
	for i := 0; i <= 40; i++ {
		up := 95 + float64(i)/2
		fmt.Fprintln(&tb, sampleLine(up, uint64(80*up), uint64(20*up), uint64(50*up)))
		fmt.Fprintf(&hb, "HOSTCPU up=%.1f cpu=%d,0,0,%d,0,0,0,0\n", up, uint64(150*up), uint64(50*up))
	}
	require.NoError(t, os.WriteFile(samples, []byte(tb.String()), 0o644))
	require.NoError(t, os.WriteFile(hostSamples, []byte(hb.String()), 0o644))
	var out bytes.Buffer
	require.NoError(t, run(options{raw: raw, info: info, out: dir, title: "title", terminal: "set terminal png", samples: samples, hostSamples: hostSamples}, &out))
	require.Contains(t, out.String(), "| job | ch_count | target host CPU µs/I/O: LIO | srptarget memory | daemon CPU µs/I/O: memory | "+
		"target host idle %: LIO | memory | bench host busy %: LIO | memory |")
	require.Contains(t, out.String(), "| randread-4k-qd1 | 1 | 781 | 781 | 488 | 20.0 | 20.0 | 75.0 | 75.0 |")
	require.Contains(t, out.String(), "Bench host busy: share of the CPUs")
	runsCSV, err := os.ReadFile(filepath.Join(dir, "runs.csv"))
	require.NoError(t, err)
	require.Contains(t, string(runsCSV), ",75.00,,,\n")

	require.NotContains(t, out.String(), "two daemons", "no variant")

	// without host samples: no such column
	out.Reset()
	require.NoError(t, run(options{raw: raw, info: info, out: dir, title: "title", terminal: "set terminal png", samples: samples}, &out))
	require.NotContains(t, out.String(), "bench host busy")

	// with a variant (bench-2host-init.sh's variant=): its own wording, not the one-VM bench's
	variant := strings.Replace(srpt, "target=srpt-mem", "target=srpt-mem-adaptive", 1)
	require.NoError(t, os.WriteFile(raw, []byte(srpt+"\n"+variant+"\n"+lio+"\n"), 0o644))
	out.Reset()
	require.NoError(t, run(options{raw: raw, info: info, out: dir, title: "title", terminal: "set terminal png", samples: samples, hostSamples: hostSamples}, &out))
	require.Contains(t, out.String(), "srptarget ran two daemons, the default and the variant")
	require.NotContains(t, out.String(), "rotated by one each round")
}

func TestReadSamplesSkipsMangledLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "target-samples.txt")
	// the second line as a serial console mangled it: a kernel message in its middle
	lines := sampleLine(1, 100, 100, 10) + "\n" +
		sampleLine(1.5, 150, 120, 12) + "[   34.738488] random: crng init done\n" +
		"a console line of something else\n" +
		sampleLine(2, 200, 140, 14) + "\n"
	require.NoError(t, os.WriteFile(path, []byte(lines), 0o644))
	samples, bad, err := readSamples(path, ParseTargetSample)
	require.NoError(t, err)
	require.Len(t, samples, 2)
	require.Equal(t, []float64{1, 2}, []float64{samples[0].Up, samples[1].Up})
	require.Len(t, bad, 1)
	require.Contains(t, bad[0], path+":2: dcs:")
}
