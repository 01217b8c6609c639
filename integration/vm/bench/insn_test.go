package main

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// epochOffset is the host epoch (s) at the initiator's uptime 0 in these tests.
const epochOffset = 1.7e9

// insnFile writes plugin counts every 0.25 s from uptime 0 to end: an idle target executes
// 1e6 kernel and 2e5 user instructions and 100 system calls a second; extra(up) adds, per
// second, what a job running at up executes on top.
func insnFile(t *testing.T, dir string, end float64, extra func(up float64) [insnKinds]float64) string {
	var b strings.Builder
	b.WriteString("# insn 1 target=x86_64 vcpus=1 inline interval_ms=250 tb=off\n")
	var n [insnKinds]float64
	idle := [insnKinds]float64{1e6, 2e5, 100}
	for i := 0; float64(i)/4 <= end; i++ {
		up := float64(i) / 4
		if i > 0 {
			e := extra(up - 0.125) // the rate is constant within each quarter second
			for k := range n {
				n[k] += (idle[k] + e[k]) / 4
			}
		}
		fmt.Fprintf(&b, "S %d %d %d %d\n", int64((up+epochOffset)*1e6), int64(n[0]), int64(n[1]), int64(n[2]))
	}
	p := filepath.Join(dir, "insn.txt")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

// insnLine is a BENCH line of randread-4k-qd32 (1024 IOPS) for target from up0 to up1 whose
// disk moved ios 4 KiB I/Os.
func insnLine(target string, round int, up0, up1 float64, ios int) string {
	l := strings.NewReplacer("round=2", fmt.Sprintf("round=%d", round), "target=srpt-mem", "target="+target, "profiled=1", "profiled=0",
		"up0=100.00", fmt.Sprintf("disk0=7,80 up0=%.2f", up0), "up1=106.00", fmt.Sprintf("disk1=%d,%d up1=%.2f", 7+ios, 80+8*ios, up1)).
		Replace(fmt.Sprintf(head, "randread-4k-qd32"))
	return l + " | " + terse(false, "4096", "1024", "31.25", "30", "99", "150")
}

// perIO is what the test's jobs execute on top of the idle target: srptarget from 100 to 106
// (6144 I/Os), 40000 kernel and 10000 user instructions and 0.5 system calls per I/O; LIO
// from 110 to 116, 30000 kernel instructions per I/O.
func perIO(up float64) [insnKinds]float64 {
	switch {
	case up > 100 && up < 106:
		return [insnKinds]float64{1024 * 40000, 1024 * 10000, 1024 * 0.5}
	case up > 110 && up < 116:
		return [insnKinds]float64{1024 * 30000, 0, 0}
	}
	return [insnKinds]float64{}
}

func TestParseInsnSample(t *testing.T) {
	s, ok, err := parseInsnSample("S 1700000012500000 10 20 3", epochOffset)
	require.NoError(t, err)
	require.True(t, ok)
	require.InDelta(t, 12.5, s.Up, 1e-6)
	require.Equal(t, [insnKinds]float64{10, 20, 3}, s.N)
	_, ok, err = parseInsnSample("# insn 1 target=x86_64", 0)
	require.NoError(t, err)
	require.False(t, ok)
	_, _, err = parseInsnSample("S 1 2 3", 0)
	require.ErrorContains(t, err, "4 fields, want 5")
	_, _, err = parseInsnSample("X 1 2 3 x", 0)
	require.Error(t, err)
}

func TestApplyInsnSamples(t *testing.T) {
	dir := t.TempDir()
	samples, err := ReadInsnSamples(insnFile(t, dir, 130, perIO), epochOffset)
	require.NoError(t, err)
	p := Params{Runtime: 5, Ramp: 1, Idle: [2]float64{20, 35}}
	rate, ok := IdleRate(samples, p)
	require.True(t, ok)
	require.InDelta(t, 1e6, rate[insnKernel], 1e-3)
	require.InDelta(t, 100, rate[insnSyscall], 1e-6)

	var runs []Run
	for _, l := range []string{insnLine("srpt-mem", 1, 100, 106, 6144), insnLine("lio", 1, 110, 116, 6144),
		insnLine("srpt-mem", 2, 128, 135, 6144)} { // past the last sample
		r, err := ParseRun(l)
		require.NoError(t, err)
		require.True(t, r.HasDisk)
		runs = append(runs, r)
	}
	profiled, err := ParseRun(strings.Replace(insnLine("srpt-mem", 3, 100, 106, 6144), "profiled=0", "profiled=1", 1))
	require.NoError(t, err)
	runs = append(runs, profiled)
	require.Equal(t, 1, ApplyInsnSamples(runs, samples, p), "the profiled run is not missing, only left out")
	require.False(t, runs[3].HasInsn, "the profiler's work is not the daemon's")
	require.Equal(t, 6144.0, runs[0].InsnIOs, "from the disk's sectors")
	d := Derive(runs[0], p)
	require.InDelta(t, 40000, d.InsnKernelPerIO, 1e-3, "net of the idle rate")
	require.InDelta(t, 10000, d.InsnUserPerIO, 1e-3)
	require.InDelta(t, 0.5, d.SyscallsPerIO, 1e-6)
	d = Derive(runs[1], p)
	require.InDelta(t, 30000, d.InsnKernelPerIO, 1e-3)
	require.InDelta(t, 0, d.InsnUserPerIO, 1e-6)
	require.False(t, runs[2].HasInsn)
	require.True(t, math.IsNaN(Derive(runs[2], p).InsnKernelPerIO))

	// without an idle window: gross, the idle target's 6 s included
	p.Idle = [2]float64{}
	_, ok = IdleRate(samples, p)
	require.False(t, ok)
	ApplyInsnSamples(runs, samples, p)
	require.InDelta(t, 40000+6e6/6144, Derive(runs[0], p).InsnKernelPerIO, 1e-3)

	// a line without disk counters: IOPS x (ramp + runtime)
	r, err := ParseRun(line("randread-4k-qd32", false))
	require.NoError(t, err)
	require.False(t, r.HasDisk)
	require.Equal(t, 1024.0*6, runIOs(r, p))
	require.Equal(t, 128*1024.0, jobBlockSize("read-128k-qd32"))
	require.Zero(t, jobBlockSize("odd"))
}

func TestRunInsn(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw.txt")
	info := filepath.Join(dir, "info.txt")
	lines := insnLine("srpt-mem", 1, 100, 106, 6144) + "\n" + insnLine("lio", 1, 110, 116, 6144) + "\n"
	require.NoError(t, os.WriteFile(raw, []byte(lines), 0o644))
	require.NoError(t, os.WriteFile(info, []byte("BENCHINFO guest_cpu=QEMU Virtual CPU version 2.5+ x 2\n"+
		"BENCHINFO runtime=5 ramp=1 rounds=1 ch_counts=1 size_mib=256\nBENCHINFO idle=20.0,35.0\n"), 0o644))
	var b strings.Builder
	for i := 0; i <= 260; i++ {
		up := float64(i) / 2
		fmt.Fprintln(&b, sampleLine(up, uint64(80*up), uint64(20*up), uint64(50*up)))
	}
	samples := filepath.Join(dir, "target-samples.txt")
	require.NoError(t, os.WriteFile(samples, []byte(b.String()), 0o644))
	var out bytes.Buffer
	require.NoError(t, run(options{raw: raw, info: info, out: dir, title: "title", terminal: "set terminal png", samples: samples,
		insn: insnFile(t, dir, 130, perIO), insnOffset: epochOffset}, &out))
	require.Contains(t, out.String(), "| job | ch_count | instructions/I/O (k): LIO | srptarget memory | memory / LIO | kernel (k): LIO | memory | "+
		"user (k): LIO | memory | system calls/I/O: LIO | memory | context switches/I/O: LIO | memory |")
	require.Contains(t, out.String(), "| randread-4k-qd32 | 1 | 30.0 | 50.0 | 1.67 | 30.0 | 40.0 | 0.00 | 10.0 | 0.00 | 0.50 |")
	sum, err := os.ReadFile(filepath.Join(dir, "two-host-summary.csv"))
	require.NoError(t, err)
	require.Contains(t, string(sum), "randread-4k-qd32/insn-per-io,1,lio,30000.000,\n")
	require.Contains(t, string(sum), "randread-4k-qd32/insn-per-io,1,srpt-mem,50000.000,0.600\n", "above 1 is better for srptarget")
	require.Contains(t, string(sum), "randread-4k-qd32/syscalls-per-io,1,srpt-mem,0.500,\n", "no ratio to none")
	runsCSV, err := os.ReadFile(filepath.Join(dir, "runs.csv"))
	require.NoError(t, err)
	require.Contains(t, string(runsCSV), ",40000.00,10000.00,0.50\n")
}

// tbDump writes per-block counts, a dump every second from 0 to 130, with the blocks of
// blocks (id: address, instructions); execs(up, id) is how often block id ran in the second
// that ends at up.
func tbDump(t *testing.T, dir string, blocks map[int][2]uint64, execs func(up float64, id int) uint64) string {
	var b strings.Builder
	b.WriteString("# insn-tb 1 target=x86_64\n")
	for id := 0; id < len(blocks); id++ {
		fmt.Fprintf(&b, "T %d %x %d\n", id, blocks[id][0], blocks[id][1])
	}
	for s := 0; s <= 130; s++ {
		fmt.Fprintf(&b, "D %d\n", int64((float64(s)+epochOffset)*1e6))
		if s == 0 {
			continue
		}
		for id := 0; id < len(blocks); id++ {
			if x := execs(float64(s), id); x > 0 {
				fmt.Fprintf(&b, "%d %d\n", id, x)
			}
		}
	}
	p := filepath.Join(dir, "insn-tb.txt")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

func writeGzip(t *testing.T, path, text string) {
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	_, err := z.Write([]byte(text))
	require.NoError(t, err)
	require.NoError(t, z.Close())
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
}

func TestAttributeFunctions(t *testing.T) {
	dir := t.TempDir()
	// a function of this command stands for the daemon's code (a test binary has no symbols)
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build a binary with symbols")
	}
	exe := filepath.Join(dir, "bench")
	out, err := exec.Command(gobin, "build", "-o", exe, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	ef, err := elf.Open(exe)
	require.NoError(t, err)
	syms, err := ef.Symbols()
	require.NoError(t, err)
	var fn elf.Symbol
	for _, s := range syms {
		if s.Name == "main.jobBlockSize" {
			fn = s
		}
	}
	require.NotZero(t, fn.Value, "the test binary has its symbols")
	var text *elf.Prog
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	require.NotNil(t, text)
	ef.Close()
	const load = 0x400000 // where the "guest" maps the text segment
	maps := filepath.Join(dir, "srptarget.maps")
	require.NoError(t, os.WriteFile(maps, []byte(fmt.Sprintf("%x-%x r-xp %08x 00:02 11 %s\n"+
		"7f0000000000-7f0000100000 r-xp 00000000 00:02 12 /usr/lib/x86_64-linux-gnu/libc.so.6\n",
		load, load+text.Memsz, text.Off, daemonPath)), 0o644))
	ksyms := filepath.Join(dir, "kallsyms.gz")
	writeGzip(t, ksyms, "ffffffff81000000 T do_work\nffffffff81100000 T other\n"+
		"ffffffff81200000 T entry_SYSCALL_64\nffffffff81200100 t after_entry\n"+
		"ffffffff81300000 T __x64_sys_read\nffffffff81300200 T __x64_sys_write\n"+
		"ffffffffc0001000 t rxe_requester\t[rdma_rxe]\nffffffffc0002000 t rxe_end\t[rdma_rxe]\n")
	daemonAddr := fn.Value - text.Vaddr + load
	blocks := map[int][2]uint64{
		0: {0xffffffff81000000, 10},       // do_work
		1: {0xffffffff81200000, 5},        // entry_SYSCALL_64
		2: {0xffffffff81300000, 8},        // __x64_sys_read
		3: {0xffffffffc0001040, 3},        // in rxe_requester
		4: {daemonAddr + 1, 4},            // in jobBlockSize
		5: {0x7f0000000100, 7},            // libc, no symbols given
		6: {0x00005555deadbeef, 2},        // another process
		7: {0xffffffff81000000 + 0x40, 6}, // do_work again, another block
	}
	srpt := func(up float64) bool { return up > 100 && up <= 106 }
	lio := func(up float64) bool { return up > 110 && up <= 116 }
	tb := tbDump(t, dir, blocks, func(up float64, id int) uint64 {
		switch {
		case id == 0:
			n := uint64(1000) // the idle target's, every second
			if srpt(up) {
				n += 1024 * 100
			}
			return n
		case id == 7 && srpt(up):
			return 1024
		case (id == 1 || id == 2) && srpt(up):
			return 1024
		case id == 3 && lio(up):
			return 1024 * 200
		case id == 4 && srpt(up):
			return 1024 * 50
		case id == 5 && srpt(up):
			return 1024
		case id == 6:
			return 10 // idle too
		}
		return 0
	})
	var runs []Run
	for _, l := range []string{insnLine("srpt-mem", 1, 100, 106, 6144), insnLine("lio", 1, 110, 116, 6144),
		insnLine("srpt-mem", 2, 100, 106, 6144)} {
		r, err := ParseRun(l)
		require.NoError(t, err)
		runs = append(runs, r)
	}
	runs[2].Ch = 2 // not the attributed ch_count
	profiled := runs[0]
	profiled.Round, profiled.Profiled = 3, true // not counted either
	runs = append(runs, profiled)
	p := Params{Runtime: 5, Ramp: 1, Idle: [2]float64{20, 35}}
	rep, err := AttributeFunctions(runs, p, funcOptions{tb: tb, ksyms: ksyms, maps: maps, bin: exe, root: dir,
		job: "randread-4k-qd32", ch: 1, top: 10, offset: epochOffset})
	require.NoError(t, err)
	require.Len(t, rep.Targets, 2)
	require.Equal(t, 13.0, rep.IdleSeconds, "dumps 22-34 lie inside 21-34.5")
	s := rep.target("srpt-mem")
	require.InDelta(t, 5.0, s.Seconds, 1e-6, "dumps 102-106 lie inside 101-106")
	require.InDelta(t, 5*1024.0, s.IOs, 1e-6)
	require.InDelta(t, 1000+6, s.Funcs[funcKey{"do_work", "vmlinux"}], 1e-6, "both blocks, net of the idle target's")
	require.InDelta(t, 200, s.Funcs[funcKey{"main.jobBlockSize", "srptarget"}], 1e-6)
	require.InDelta(t, 7, s.Funcs[funcKey{"(libc.so.6, no symbol)", "libc.so.6"}], 1e-6)
	require.InDelta(t, 0, s.Funcs[funcKey{"(other processes)", "user"}], 1e-9, "idle: cancelled")
	require.InDelta(t, 1, s.Events["system calls"], 1e-9)
	require.InDelta(t, 1, s.Syscalls["read"], 1e-9)
	require.InDelta(t, 1000+6+5+8+200+7, s.Total, 1e-6)
	l := rep.target(refTarget)
	require.InDelta(t, 600, l.Funcs[funcKey{"rxe_requester", "rdma_rxe"}], 1e-6)
	require.InDelta(t, 600, l.Objects["rdma_rxe"], 1e-6)
	require.InDelta(t, 0, l.Funcs[funcKey{"do_work", "vmlinux"}], 1e-6)

	var buf bytes.Buffer
	require.NoError(t, rep.Write(&buf))
	out = buf.Bytes()
	require.Contains(t, string(out), "| `main.jobBlockSize` | srptarget | 0 | 200 | +200 |")
	require.Contains(t, string(out), "| `do_work` | vmlinux | 0 | 1006 | +1006 |")
	require.Contains(t, string(out), "| `rxe_requester` | rdma_rxe | 600 | 0 | -600 |")
	require.Contains(t, string(out), "| all | 600 | 1226 | +626 |")
	require.Contains(t, string(out), "srptarget's system calls per I/O: read 1.000,")

	// with instruction counts, the figures are scaled to their per-I/O total
	runs[0].HasInsn, runs[0].Insn, runs[0].InsnIOs = true, [insnKinds]float64{2 * 1226 * 1000, 0, 0}, 1000
	rep, err = AttributeFunctions(runs, p, funcOptions{tb: tb, ksyms: ksyms, maps: maps, bin: exe, root: dir,
		job: "randread-4k-qd32", ch: 1, top: 10, offset: epochOffset})
	require.NoError(t, err)
	s = rep.target("srpt-mem")
	require.InDelta(t, 2, s.Scale, 1e-9)
	require.InDelta(t, 2*1226, s.Total, 1e-6)
	require.InDelta(t, 2*1006, s.Funcs[funcKey{"do_work", "vmlinux"}], 1e-6)
	require.InDelta(t, 2, s.Syscalls["read"], 1e-9)
	require.InDelta(t, 1, rep.target(refTarget).Scale, 1e-9, "LIO's runs have no counts here")

	_, err = AttributeFunctions(runs, p, funcOptions{tb: tb, ksyms: ksyms, job: "read-128k-qd32", ch: 1})
	require.ErrorContains(t, err, "no runs of read-128k-qd32")
}

// TestPluginBuilds compiles the qemu plugin as bench-2host.sh does: it must build without a
// warning and export what qemu looks for.
func TestPluginBuilds(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	so := filepath.Join(t.TempDir(), "insn.so")
	out, err := exec.Command(cc, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden",
		"-o", so, "../insn/insn.c", "-lpthread").CombinedOutput()
	require.NoError(t, err, "%s", out)
	f, err := elf.Open(so)
	require.NoError(t, err)
	defer f.Close()
	dyn, err := f.DynamicSymbols()
	require.NoError(t, err)
	exported := map[string]bool{}
	for _, s := range dyn {
		if s.Section != elf.SHN_UNDEF {
			exported[s.Name] = true
		}
	}
	require.True(t, exported["qemu_plugin_install"])
	require.True(t, exported["qemu_plugin_version"])
	require.Len(t, exported, 2, "nothing else: %v", exported)
}
