package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// terse builds a fio --terse-version=3 line (130 fields, as fio 3.33 prints with one disk)
// with the given numbers in the read or the write status and zeros elsewhere.
func terse(write bool, bwKiB, iops, latMean, p50, p99, p999 string) string {
	f := make([]string, 130)
	for i := range f {
		f[i] = "0"
	}
	f[0], f[1], f[2], f[3], f[4] = "3", "fio-3.33", "job", "0", "0"
	for _, base := range []int{terseReadBase, terseWriteBase} {
		for i := 0; i < offPctCount; i++ {
			f[base-1+offPctFirst+i] = "0%=0"
		}
	}
	base := terseReadBase
	if write {
		base = terseWriteBase
	}
	set := func(off int, v string) { f[base-1+off] = v }
	set(offBWKiB, bwKiB)
	set(offIOPS, iops)
	set(offLatMean, latMean)
	set(offPctFirst, "50.000000%="+p50)
	set(offPctFirst+1, "99.000000%="+p99)
	set(offPctFirst+2, "99.900000%="+p999)
	return strings.Join(f, ";")
}

const head = "BENCH round=2 ch=1 target=srpt-mem job=%s profiled=1 errs=0 " +
	"cpu0=100,0,200,1000,0,0,50,0,0,0 ctxt0=1000 irq0=10,20,0 dproc0=10,40 dio0=5,7 up0=100.00 " +
	"cpu1=300,0,600,1300,0,0,150,0,0,0 ctxt1=7144 irq1=3082,3092,0 dproc1=30,220 dio1=6149,12295 up1=106.00"

// oldHead is a line of the first guest script, without the scheduling and system-call counters.
const oldHead = "BENCH round=2 ch=1 target=srpt-mem job=%s profiled=1 errs=0 " +
	"cpu0=100,0,200,1000,0,0,50,0,0,0 dproc0=10,40 up0=100.00 " +
	"cpu1=300,0,600,1300,0,0,150,0,0,0 dproc1=30,220 up1=106.00"

func line(job string, write bool) string {
	return fmt.Sprintf(head, job) + " | " + terse(write, "4096", "1024", "31.25", "30", "99", "150")
}

func TestParseRun(t *testing.T) {
	tests := []struct {
		name  string
		line  string
		write bool
	}{
		{"read job: read status", line("randread-4k-qd32", false), false},
		{"write job: write status", line("randwrite-4k-qd32", true), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRun(tc.line)
			require.NoError(t, err)
			require.Equal(t, 2, r.Round)
			require.Equal(t, 1, r.Ch)
			require.Equal(t, "srpt-mem", r.Target)
			require.True(t, r.Profiled)
			require.Equal(t, tc.write, r.Write)
			require.Equal(t, 4096.0, r.BWKiB)
			require.Equal(t, 1024.0, r.IOPS)
			require.Equal(t, 31.25, r.LatMean)
			require.Equal(t, []float64{30, 99, 150}, []float64{r.P50, r.P99, r.P999})
			require.Equal(t, []uint64{100, 0, 200, 1000, 0, 0, 50, 0, 0, 0}, r.CPU0)
			require.Equal(t, [2]uint64{30, 220}, r.Daemon1)
			require.Equal(t, 106.0, r.Up1)
			require.True(t, r.HasSched)
			require.True(t, r.HasDaemonIO)
			require.Equal(t, [3]uint64{3082, 3092, 0}, r.IRQ1)
			require.Equal(t, [2]uint64{6149, 12295}, r.DaemonIO1)
			require.Equal(t, uint64(7144), r.Ctxt1)
		})
	}
}

func TestParseRunErrors(t *testing.T) {
	good := line("randread-4k-qd32", false)
	head, tail, _ := strings.Cut(good, " | ")
	tests := []struct {
		name, line, want string
	}{
		{"no separator", head, "not a BENCH line"},
		{"other line", "SRPTVM: check x: pass | y", "not a BENCH line"},
		{"missing key", strings.Replace(good, "ch=1 ", "", 1), "no ch="},
		{"duplicate key", strings.Replace(good, "ch=1 ", "ch=1 ch=2 ", 1), "key ch twice"},
		{"not key=value", strings.Replace(good, "ch=1 ", "ch1 ", 1), `field "ch1" is not key=value`},
		{"bad number", strings.Replace(good, "round=2", "round=x", 1), "round:"},
		{"short cpu line", strings.Replace(good, "cpu0=100,0,200,1000,0,0,50,0,0,0", "cpu0=1,2", 1), "cpu0: 2 numbers, want at least 4"},
		{"cpu lines differ", strings.Replace(good, "cpu0=100,0,200,1000,0,0,50,0,0,0", "cpu0=100,0,200,1000", 1), "cpu0 has 4 fields, cpu1 10"},
		{"time backwards", strings.Replace(good, "up1=106.00", "up1=99", 1), "up1 99 before up0 100"},
		{"daemon triple", strings.Replace(good, "dproc0=10,40", "dproc0=1,2,3", 1), "dproc0: 3 numbers, want 2"},
		{"irq pair", strings.Replace(good, "irq0=10,20,0", "irq0=10,20", 1), "irq0: 2 numbers, want at least 3"},
		{"bad ctxt", strings.Replace(good, "ctxt1=7144", "ctxt1=-1", 1), "ctxt1:"},
		{"terse too short", head + " | 3;fio;x;0;0", "5 fields, want at least 87"},
		{"terse version", head + " | 2" + tail[1:], `terse version "2", want 3`},
		{"fio error", head + " | " + strings.Replace(tail, "3;fio-3.33;job;0;0;", "3;fio-3.33;job;0;5;", 1), "fio reported error 5"},
		{"percentile field", head + " | " + strings.Replace(tail, "50.000000%=30", "fifty", 1), `"fifty" is not a percentile`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRun(tc.line)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestDerive(t *testing.T) {
	r, err := ParseRun(line("randread-4k-qd32", false))
	require.NoError(t, err)
	// busy: user 200 + system 400 + softirq 100 = 700 ticks = 7 s; total 700 + idle 300.
	busy, total, sys, softirq := r.CPUTicks()
	require.Equal(t, []float64{700, 1000, 400, 100}, []float64{busy, total, sys, softirq})
	require.Equal(t, 200.0, r.DaemonTicks())
	d := Derive(r, Params{Runtime: 5, Ramp: 1, NCPU: 2})
	// 1024 IOPS over 6 s = 6144 I/Os: 7 s / 6144 and 2 s / 6144
	require.InDelta(t, 7e6/6144, d.GuestCPUPerIO, 1e-9)
	require.InDelta(t, 2e6/6144, d.DaemonCPUPerIO, 1e-9)
	require.InDelta(t, 30.0, d.GuestIdlePct, 1e-9)
	require.InDelta(t, 10.0, d.SoftirqPct, 1e-9)
	require.InDelta(t, 6.0, d.Window, 1e-9)
	require.InDelta(t, 100*2.0/6, d.DaemonPct, 1e-9)
	require.InDelta(t, 90.0, d.DaemonSysPct, 1e-9)
	// 6144 context switches, 3072 + 3072 IPIs, 6144 reads and 12288 writes over 6144 I/Os
	require.InDelta(t, 1.0, d.CtxtPerIO, 1e-9)
	require.InDelta(t, 1.0, d.IPIPerIO, 1e-9)
	require.InDelta(t, 1.0, d.DaemonReadsPerIO, 1e-9)
	require.InDelta(t, 2.0, d.DaemonWritesPerIO, 1e-9)

	// a line without the optional counters: those figures are NaN, the others unchanged
	old, err := ParseRun(fmt.Sprintf(oldHead, "randread-4k-qd32") + " | " + terse(false, "4096", "1024", "31.25", "30", "99", "150"))
	require.NoError(t, err)
	require.False(t, old.HasSched)
	require.False(t, old.HasDaemonIO)
	od := Derive(old, Params{Runtime: 5, Ramp: 1, NCPU: 2})
	require.True(t, math.IsNaN(od.CtxtPerIO) && math.IsNaN(od.IPIPerIO) && math.IsNaN(od.DaemonReadsPerIO) && math.IsNaN(od.DaemonWritesPerIO))
	require.InDelta(t, d.GuestCPUPerIO, od.GuestCPUPerIO, 1e-9)

	// no I/O: no per-I/O figure instead of a division by zero
	r.IOPS = 0
	d = Derive(r, Params{Runtime: 5, Ramp: 1})
	require.Zero(t, d.GuestCPUPerIO)
	require.Zero(t, d.DaemonCPUPerIO)
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, Median(tc.in), "%v", tc.in)
	}
	require.True(t, math.IsNaN(Median(nil)))
	in := []float64{3, 1, 2}
	Median(in)
	require.Equal(t, []float64{3, 1, 2}, in, "the input is not reordered")
}

// mkRuns makes runs of one job with the given IOPS per target and round.
func mkRuns(t *testing.T, iops map[string][]float64) []Run {
	t.Helper()
	var runs []Run
	for target, vs := range iops {
		for i, v := range vs {
			l := strings.NewReplacer("round=2", fmt.Sprintf("round=%d", i+1), "target=srpt-mem", "target="+target).
				Replace(fmt.Sprintf(head, "randread-4k-qd32")) + " | " + terse(false, "4096", fmt.Sprint(v), "31.25", "30", "99", "150")
			r, err := ParseRun(l)
			require.NoError(t, err)
			runs = append(runs, r)
		}
	}
	return runs
}

func TestSummarize(t *testing.T) {
	runs := mkRuns(t, map[string][]float64{
		"lio":       {1000, 1200, 800},
		"srpt-mem":  {500, 700, 600},
		"srpt-null": {1500, 1100},
	})
	// a run during which ib_srp reconnected is left out
	bad := runs[0]
	bad.Errs = 2
	bad.IOPS = 1
	runs = append(runs, bad)
	s := Summarize(runs, Params{Runtime: 5, Ramp: 1, NCPU: 2})
	require.Equal(t, 1, s.Excluded)
	require.Equal(t, []int{1}, s.ChCounts)
	require.Equal(t, Stat{Median: 1000, Min: 800, Max: 1200, N: 3}, s.Cells[cellKey{"randread-4k-qd32", 1, "lio"}])
	require.Equal(t, Stat{Median: 1300, Min: 1100, Max: 1500, N: 2}, s.Cells[cellKey{"randread-4k-qd32", 1, "srpt-null"}])
	require.Equal(t, 0.6, s.Ratio("randread-4k-qd32", 1, "srpt-mem"))
	require.Equal(t, 1.3, s.Ratio("randread-4k-qd32", 1, "srpt-null"))
	require.True(t, math.IsNaN(s.Ratio("randread-4k-qd32", 2, "srpt-mem")), "no ch_count 2 runs")

	var b bytes.Buffer
	s.WriteTable(&b)
	require.Contains(t, b.String(), "| 4 KiB random read, QD 32 | IOPS | 1 | 1000 (800-1200) | 600 (500-700) | 0.60 (0.50-0.75) | 1300 (1100-1500) | 1.30 (0.92-1.50) |\n")
	require.NotContains(t, b.String(), "4 KiB random write", "a job that did not run has no row")
	require.Contains(t, b.String(), "1 of 9 runs left out")

	b.Reset()
	require.NoError(t, s.WriteSummaryCSV(&b))
	// paired: 500/1000, 700/1200, 600/800
	require.Contains(t, b.String(), "randread-4k-qd32,IOPS,1,srpt-mem,600.000,500.000,700.000,3,0.600,0.500,0.583,0.750\n")
	require.Contains(t, b.String(), "randread-4k-qd32,IOPS,1,lio,1000.000,800.000,1200.000,3,1.000,1.000,1.000,1.000\n")
	require.Equal(t, []float64{1100.0 / 1200, 1.5}, s.PairedRatios("randread-4k-qd32", 1, "srpt-null"))
}

func TestRunWritesFiles(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw.txt")
	info := filepath.Join(dir, "info.txt")
	require.NoError(t, os.WriteFile(raw, []byte("noise\n"+line("randread-4k-qd32", false)+"\n"+
		strings.Replace(line("randread-4k-qd32", false), "target=srpt-mem", "target=lio", 1)+"\n"), 0o644))
	require.NoError(t, os.WriteFile(info, []byte("BENCHINFO guest_cpu=QEMU Virtual CPU version 2.5+ x 2\n"+
		"BENCHINFO runtime=5 ramp=1 rounds=3 ch_counts=1 2 size_mib=256\n"), 0o644))
	var out bytes.Buffer
	require.NoError(t, run(options{raw: raw, info: info, out: dir, title: "title", terminal: "set terminal png"}, &out))
	require.Contains(t, out.String(), "| 4 KiB random read, QD 32 | IOPS | 1 | 1024 (1024-1024) | 1024 (1024-1024) | 1.00 |")
	for _, f := range []string{"runs.csv", "summary.csv", "table.md", "iops.dat", "mibs.dat", "latmean.dat", "latp99.dat", "cpu.dat", "ratio.dat", "chart.gp"} {
		require.FileExists(t, filepath.Join(dir, f))
	}
	csvData, err := os.ReadFile(filepath.Join(dir, "runs.csv"))
	require.NoError(t, err)
	require.Equal(t, strings.Join(runsHeader, ","), strings.SplitN(string(csvData), "\n", 2)[0])
	require.Contains(t, string(csvData), "2,1,srpt-mem,randread-4k-qd32,1,0,1024,4.00,31.25,30,99,150,6.00,30.00,10.00,1139.32,33.33,90.00,325.52,1.00,1.00,1.00,2.00,,,,,,\n") // no wake-up, preemption, host or instruction figures
	table, err := os.ReadFile(filepath.Join(dir, "table.md"))
	require.NoError(t, err)
	// the data have no srpt-null runs (srpt_luns=mem), hence no such column
	require.Contains(t, string(table), "| job | ch_count | context switches/I/O: LIO | srptarget memory | IPIs/I/O: LIO | srptarget memory | daemon read()/I/O: memory | daemon write()/I/O: memory |\n")
	require.Contains(t, string(table), "| randread-4k-qd32 | 1 | 1.00 | 1.00 | 1.00 | 1.00 | 1.00 | 2.00 |\n")
	require.NotContains(t, string(table), "randwrite", "jobs that did not run have no rows")
	iops, err := os.ReadFile(filepath.Join(dir, "iops.dat"))
	require.NoError(t, err)
	require.Equal(t, "# label, then median min max for: lio srpt-mem\n\"read ch1\" 1024.000 1024.000 1024.000 1024.000 1024.000 1024.000\n", string(iops))
	mibs, err := os.ReadFile(filepath.Join(dir, "mibs.dat"))
	require.NoError(t, err)
	require.Equal(t, "# label, then median min max for: lio srpt-mem\n", string(mibs))
	gp, err := os.ReadFile(filepath.Join(dir, "chart.gp"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(gp), "set terminal png\nset termoption noenhanced\nset output 'chart.png'\n"), string(gp))
	// one job: the panels without data are left out (gnuplot: "x range is invalid")
	require.Contains(t, string(gp), "set multiplot layout 1,3 ")
	require.Contains(t, string(gp), "plot 'iops.dat' using 2:3:4:xtic(1) title \"LIO\"")
	require.NotContains(t, string(gp), "mibs.dat")
	require.NotContains(t, string(gp), "latmean.dat")
	gnuplot(t, dir)

	require.ErrorContains(t, run(options{raw: filepath.Join(dir, "info.txt"), info: info, out: dir}, &out), "no BENCH lines")
	require.NoError(t, os.WriteFile(info, []byte("BENCHINFO kernel=6.1\n"), 0o644))
	require.ErrorContains(t, run(options{raw: raw, info: info, out: dir}, &out), "no runtime=")
}

func FuzzParseRun(f *testing.F) {
	f.Add(line("randread-4k-qd32", false))
	f.Add(line("write-128k-qd32", true))
	f.Add("BENCH | 3")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRun(s)
		if err != nil {
			return
		}
		// what parsed is consistent: equal CPU columns, time forwards, a known direction
		require.Len(t, r.CPU1, len(r.CPU0))
		require.GreaterOrEqual(t, r.Up1, r.Up0)
		require.Equal(t, strings.Contains(r.Job, "write"), r.Write)
		Derive(r, Params{Runtime: 1})
	})
}

func TestRelative(t *testing.T) {
	s := Summary{Cells: map[cellKey]Stat{
		{"randread-4k-qd1-mean", 2, "lio"}:      {Median: 1000, N: 3},
		{"randread-4k-qd1-mean", 2, "srpt-mem"}: {Median: 2000, N: 3},
		{"randread-4k-qd32", 2, "lio"}:          {Median: 1000, N: 3},
		{"randread-4k-qd32", 2, "srpt-mem"}:     {Median: 2000, N: 3},
	}, ChCounts: []int{2}}
	byKey := map[string]Metric{}
	for _, m := range Metrics {
		byKey[m.Key] = m
	}
	// the table's ratio is always srptarget / LIO; the chart's relative performance
	// inverts it for latency, so that higher is better in every column
	require.Equal(t, 2.0, s.Ratio("randread-4k-qd1-mean", 2, "srpt-mem"))
	require.Equal(t, 0.5, s.relative(byKey["randread-4k-qd1-mean"], 2, "srpt-mem"))
	require.Equal(t, 2.0, s.relative(byKey["randread-4k-qd32"], 2, "srpt-mem"))
	require.True(t, math.IsNaN(s.relative(byKey["randread-4k-qd1-p99"], 2, "srpt-mem")))
}

// gnuplot draws chart.png from the chart.gp in dir, as integration/vm/bench.sh does.
func gnuplot(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("gnuplot"); err != nil {
		t.Log("gnuplot is not installed: chart.gp is not drawn")
		return
	}
	cmd := exec.Command("gnuplot", "chart.gp")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), "invalid")
	st, err := os.Stat(filepath.Join(dir, "chart.png"))
	require.NoError(t, err)
	require.NotZero(t, st.Size())
}

func TestTargets(t *testing.T) {
	tests := []struct {
		name   string
		seen   []string // targets in the order of the runs
		modes  []string
		keys   []string
		labels []string
		shorts []string
	}{
		{"one daemon", []string{"srpt-null", "lio", "srpt-mem"}, nil,
			[]string{"lio", "srpt-mem", "srpt-null"},
			[]string{"LIO", "srptarget memory", "srptarget null"},
			[]string{"LIO", "memory", "null"}},
		{"no LIO run: the reference column stays", []string{"srpt-mem"}, nil,
			[]string{"lio", "srpt-mem"}, []string{"LIO", "srptarget memory"}, []string{"LIO", "memory"}},
		{"modes in the order given, memory before null",
			[]string{"srpt-null-poll", "srpt-mem-poll", "lio", "srpt-mem-adaptive20us", "srpt-null-event", "srpt-mem-event"},
			[]string{"event", "adaptive20us", "poll"},
			[]string{"lio", "srpt-mem-event", "srpt-mem-adaptive20us", "srpt-mem-poll", "srpt-null-event", "srpt-null-poll"},
			[]string{"LIO", "srptarget memory event", "srptarget memory adaptive20us", "srptarget memory poll", "srptarget null event", "srptarget null poll"},
			[]string{"LIO", "memory event", "memory adaptive20us", "memory poll", "null event", "null poll"}},
		{"modes unknown to the guest info: order of appearance, after the known",
			[]string{"srpt-mem-poll", "srpt-mem-spin", "srpt-mem-event", "srpt-mem-adaptive"},
			[]string{"event"},
			[]string{"lio", "srpt-mem-event", "srpt-mem-poll", "srpt-mem-spin", "srpt-mem-adaptive"},
			[]string{"LIO", "srptarget memory event", "srptarget memory poll", "srptarget memory spin", "srptarget memory adaptive"},
			[]string{"LIO", "memory event", "memory poll", "memory spin", "memory adaptive"}},
		{"other names last, in order of appearance",
			[]string{"scst", "srpt-file", "srpt-null", "spdk", "srpt-mem"}, nil,
			[]string{"lio", "srpt-mem", "srpt-null", "srpt-file", "scst", "spdk"},
			[]string{"LIO", "srptarget memory", "srptarget null", "srptarget file", "scst", "spdk"},
			[]string{"LIO", "memory", "null", "file", "scst", "spdk"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var runs []Run
			for _, k := range tc.seen {
				runs = append(runs, Run{Target: k}, Run{Target: k})
			}
			var keys, labels, shorts []string
			for _, tg := range Targets(runs, tc.modes) {
				keys, labels, shorts = append(keys, tg.Key), append(labels, tg.Label), append(shorts, tg.Short)
			}
			require.Equal(t, tc.keys, keys)
			require.Equal(t, tc.labels, labels)
			require.Equal(t, tc.shorts, shorts)
		})
	}
	require.Equal(t, Target{Key: "srpt-null-adaptive20us", Label: "srptarget null adaptive20us", Short: "null adaptive20us", LUN: "null", Mode: "adaptive20us"},
		ParseTarget("srpt-null-adaptive20us"))
}

// benchLine is a BENCH line of randread-4k-qd32 for target in round with the given IOPS.
func benchLine(target string, round int, iops float64) string {
	return strings.NewReplacer("round=2", fmt.Sprintf("round=%d", round), "target=srpt-mem", "target="+target).
		Replace(fmt.Sprintf(head, "randread-4k-qd32")) + " | " + terse(false, "4096", fmt.Sprint(iops), "31.25", "30", "99", "150")
}

// cells splits a Markdown table row into its cells.
func cells(row string) []string {
	return strings.Split(strings.TrimSuffix(strings.TrimPrefix(row, "| "), " |"), " | ")
}

func TestReportTables(t *testing.T) {
	// IOPS of randread-4k-qd32 at ch_count 1 in rounds 1 and 2, per target, in the order the
	// guest printed them (round 2 rotated the modes)
	type tgt struct {
		key  string
		iops [2]float64
	}
	tests := []struct {
		name    string
		info    string
		targets []tgt
		// want: the header of the metrics table, its randread-4k-qd32 row, the headers of the
		// two figure tables, and the ratio.dat row
		header, row, cpuHeader, schedHeader, ratio string
		modesNote                                  bool
		// the variant table's header and randread-4k-qd32 row, empty when it has none
		variantHeader, variantRow string
	}{
		{
			name: "one daemon: the columns of docs/benchmarks.md",
			info: "BENCHINFO srpt_modes=event\n",
			targets: []tgt{
				{"srpt-mem", [2]float64{500, 1000}}, {"srpt-null", [2]float64{800, 1000}}, {"lio", [2]float64{1000, 2000}},
			},
			header:      "| job | unit | ch_count | LIO | srptarget memory | memory / LIO | srptarget null | null / LIO |",
			row:         "| 4 KiB random read, QD 32 | IOPS | 1 | 1500 (1000-2000) | 750 (500-1000) | 0.50 (0.50-0.50) | 900 (800-1000) | 0.60 (0.50-0.80) |",
			cpuHeader:   "| job | ch_count | guest CPU µs/I/O: LIO | srptarget memory | srptarget null | daemon CPU µs/I/O: memory | null | guest idle %: LIO | memory | null |",
			schedHeader: "| job | ch_count | context switches/I/O: LIO | srptarget memory | srptarget null | IPIs/I/O: LIO | srptarget memory | srptarget null | daemon read()/I/O: memory | null | daemon write()/I/O: memory | null |",
			ratio:       "\"4k rr qd32 ch1\" 0.500 0.600\n",
		},
		{
			name: "three modes, both LUNs",
			info: "BENCHINFO srpt_modes=event adaptive:20us poll\n",
			// printed in another order than the columns': the columns follow srpt_modes
			targets: []tgt{
				{"srpt-null-poll", [2]float64{1200, 3000}}, {"srpt-mem-poll", [2]float64{900, 2100}},
				{"lio", [2]float64{1000, 2000}}, {"srpt-mem-adaptive20us", [2]float64{600, 1400}},
				{"srpt-null-event", [2]float64{800, 1000}}, {"srpt-mem-event", [2]float64{500, 1000}},
			},
			header: "| job | unit | ch_count | LIO | srptarget memory event | memory event / LIO | srptarget memory adaptive20us | memory adaptive20us / LIO | " +
				"srptarget memory poll | memory poll / LIO | srptarget null event | null event / LIO | srptarget null poll | null poll / LIO |",
			row: "| 4 KiB random read, QD 32 | IOPS | 1 | 1500 (1000-2000) | 750 (500-1000) | 0.50 (0.50-0.50) | 1000 (600-1400) | 0.67 (0.60-0.70) | " +
				"1500 (900-2100) | 1.00 (0.90-1.05) | 900 (800-1000) | 0.60 (0.50-0.80) | 2100 (1200-3000) | 1.40 (1.20-1.50) |",
			cpuHeader: "| job | ch_count | guest CPU µs/I/O: LIO | srptarget memory event | srptarget memory adaptive20us | srptarget memory poll | " +
				"srptarget null event | srptarget null poll | daemon CPU µs/I/O: memory event | memory adaptive20us | memory poll | null event | null poll | " +
				"guest idle %: LIO | memory event | memory adaptive20us | memory poll | null event | null poll |",
			schedHeader: "| job | ch_count | context switches/I/O: LIO | srptarget memory event | srptarget memory adaptive20us | srptarget memory poll | " +
				"srptarget null event | srptarget null poll | IPIs/I/O: LIO | srptarget memory event | srptarget memory adaptive20us | srptarget memory poll | " +
				"srptarget null event | srptarget null poll | daemon read()/I/O: memory event | memory adaptive20us | memory poll | null event | null poll | " +
				"daemon write()/I/O: memory event | memory adaptive20us | memory poll | null event | null poll |",
			ratio:     "\"4k rr qd32 ch1\" 0.500 0.667 1.000 0.600 1.400\n",
			modesNote: true,
			// per round: adaptive20us 600/500, 1400/1000; poll 900/500, 2100/1000; null poll
			// 1200/800, 3000/1000
			variantHeader: "| job | unit | ch_count | memory adaptive20us / memory event | memory poll / memory event | null poll / null event |",
			variantRow:    "| 4 KiB random read, QD 32 | IOPS | 1 | 1.30 (better in 2 of 2) | 1.94 (better in 2 of 2) | 2.12 (better in 2 of 2) |",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var raw strings.Builder
			for round := 1; round <= 2; round++ {
				for _, tg := range tc.targets {
					fmt.Fprintln(&raw, benchLine(tg.key, round, tg.iops[round-1]))
				}
			}
			rawPath, infoPath := filepath.Join(dir, "raw.txt"), filepath.Join(dir, "info.txt")
			require.NoError(t, os.WriteFile(rawPath, []byte(raw.String()), 0o644))
			require.NoError(t, os.WriteFile(infoPath, []byte("BENCHINFO runtime=5 ramp=1 rounds=2 ch_counts=1\n"+tc.info), 0o644))
			var out bytes.Buffer
			require.NoError(t, run(options{raw: rawPath, info: infoPath, out: dir, title: "title", terminal: "set terminal png size 1200,800"}, &out))
			lines := strings.Split(out.String(), "\n")

			// the metrics table: one row (one job, one ch_count), a value and a ratio per
			// srptarget target
			require.Equal(t, tc.header, lines[0])
			require.Equal(t, "|---|---|---|"+strings.Repeat("---:|", len(cells(tc.header))-3), lines[1])
			require.Equal(t, tc.row, lines[2])
			require.Equal(t, "", lines[3])
			require.Len(t, cells(tc.row), 3+1+2*(len(tc.targets)-1))
			require.Equal(t, tc.modesNote, strings.Contains(out.String(), "one daemon per completion mode"))

			// the variant table: the daemons compared round by round, LUN by LUN
			if i := slices.Index(lines, tc.variantHeader); tc.variantHeader != "" {
				require.GreaterOrEqual(t, i, 0, "no line %q in\n%s", tc.variantHeader, out.String())
				require.Equal(t, tc.variantRow, lines[i+2])
			} else {
				require.NotContains(t, out.String(), "Each other daemon against the first")
			}

			// the figure tables: a column per target and figure, the daemon's only for srptarget
			for _, h := range []string{tc.cpuHeader, tc.schedHeader} {
				i := slices.Index(lines, h)
				require.GreaterOrEqual(t, i, 0, "no line %q in\n%s", h, out.String())
				require.Len(t, cells(lines[i+2]), len(cells(h)), lines[i+2])
				require.True(t, strings.HasPrefix(lines[i+2], "| randread-4k-qd32 | 1 | "), lines[i+2])
			}
			require.Len(t, cells(tc.cpuHeader), 2+3*len(tc.targets)-1)
			require.Len(t, cells(tc.schedHeader), 2+4*len(tc.targets)-2)

			// summary.csv: a row per target with its ratio to LIO and the paired ratios
			sum, err := os.ReadFile(filepath.Join(dir, "summary.csv"))
			require.NoError(t, err)
			for _, tg := range tc.targets {
				med := (tg.iops[0] + tg.iops[1]) / 2
				want := fmt.Sprintf("randread-4k-qd32,IOPS,1,%s,%.3f,%.3f,%.3f,2,%.3f,%.3f,%.3f,%.3f\n", tg.key,
					med, min(tg.iops[0], tg.iops[1]), max(tg.iops[0], tg.iops[1]), med/1500,
					min(tg.iops[0]/1000, tg.iops[1]/2000), (tg.iops[0]/1000+tg.iops[1]/2000)/2, max(tg.iops[0]/1000, tg.iops[1]/2000))
				require.Contains(t, string(sum), want)
			}

			// the chart: a bar per target, a ratio bar per srptarget target
			iops, err := os.ReadFile(filepath.Join(dir, "iops.dat"))
			require.NoError(t, err)
			require.Len(t, strings.Fields(strings.Split(string(iops), "\n")[1]), 1+1+3*len(tc.targets))
			ratio, err := os.ReadFile(filepath.Join(dir, "ratio.dat"))
			require.NoError(t, err)
			require.Contains(t, string(ratio), tc.ratio)
			gp, err := os.ReadFile(filepath.Join(dir, "chart.gp"))
			require.NoError(t, err)
			// header: job, unit, ch_count, LIO, then a value and a ratio column per target
			head := cells(tc.header)
			require.Contains(t, string(gp), `plot 'iops.dat' using 2:3:4:xtic(1) title "LIO" lc rgb "#4c72b0"`)
			require.Contains(t, string(gp), `plot 'ratio.dat' using 2:xtic(1) title `+fmt.Sprintf("%q", head[5]))
			for i := 1; i < len(tc.targets); i++ {
				c := 2 + 3*i
				require.Contains(t, string(gp), fmt.Sprintf("'' using %d:%d:%d title %q lc rgb %q", c, c+1, c+2, head[2+2*i], colours[i]))
				if i > 1 {
					require.Contains(t, string(gp), fmt.Sprintf("'' using %d title %q lc rgb %q", i+1, head[3+2*i], colours[i]))
				}
			}
			gnuplot(t, dir)
		})
	}
}
