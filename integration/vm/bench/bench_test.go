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
	require.Contains(t, b.String(), "| 4 KiB random write, QD 32 | IOPS | 1 | - | - | - | - | - |\n")
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
	require.NoError(t, run(raw, info, dir, "title", "set terminal png", &out))
	require.Contains(t, out.String(), "| 4 KiB random read, QD 32 | IOPS | 1 | 1024 (1024-1024) | 1024 (1024-1024) | 1.00 |")
	for _, f := range []string{"runs.csv", "summary.csv", "table.md", "iops.dat", "mibs.dat", "latmean.dat", "latp99.dat", "cpu.dat", "ratio.dat", "chart.gp"} {
		require.FileExists(t, filepath.Join(dir, f))
	}
	csvData, err := os.ReadFile(filepath.Join(dir, "runs.csv"))
	require.NoError(t, err)
	require.Equal(t, strings.Join(runsHeader, ","), strings.SplitN(string(csvData), "\n", 2)[0])
	require.Contains(t, string(csvData), "2,1,srpt-mem,randread-4k-qd32,1,0,1024,4.00,31.25,30,99,150,6.00,30.00,10.00,1139.32,33.33,90.00,325.52,1.00,1.00,1.00,2.00\n")
	table, err := os.ReadFile(filepath.Join(dir, "table.md"))
	require.NoError(t, err)
	require.Contains(t, string(table), "| randread-4k-qd32 | 1 | 1.00 | 1.00 | - | 1.00 | 1.00 | - | 1.00 | - | 2.00 | - |\n")
	iops, err := os.ReadFile(filepath.Join(dir, "iops.dat"))
	require.NoError(t, err)
	require.Contains(t, string(iops), "\"read ch1\" 1024.000 1024.000 1024.000 1024.000 1024.000 1024.000 - - -\n")
	gp, err := os.ReadFile(filepath.Join(dir, "chart.gp"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(gp), "set terminal png\nset termoption noenhanced\nset output 'chart.png'\n"), string(gp))

	require.ErrorContains(t, run(filepath.Join(dir, "info.txt"), info, dir, "", "", &out), "no BENCH lines")
	require.NoError(t, os.WriteFile(info, []byte("BENCHINFO kernel=6.1\n"), 0o644))
	require.ErrorContains(t, run(raw, info, dir, "", "", &out), "no runtime=")
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
