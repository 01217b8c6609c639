package main

import (
	"encoding/csv"
	"io"
	"math"
	"strconv"
	"strings"
)

// runsHeader are the columns of runs.csv.
var runsHeader = []string{"round", "ch_count", "target", "job", "profiled", "transport_errors",
	"iops", "mib_s", "lat_mean_us", "lat_p50_us", "lat_p99_us", "lat_p999_us",
	"window_s", "guest_idle_pct", "guest_softirq_pct", "guest_cpu_us_per_io", "daemon_cpu_pct", "daemon_sys_pct", "daemon_cpu_us_per_io",
	"ctxt_per_io", "ipi_per_io", "daemon_reads_per_io", "daemon_writes_per_io",
	"daemon_wakeups_per_io", "daemon_preemptions_per_io", "host_busy_pct",
	"insn_kernel_per_io", "insn_user_per_io", "syscalls_per_io"}

// WriteRunsCSV writes one row per fio run.
func WriteRunsCSV(w io.Writer, runs []Run, p Params) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(runsHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	g := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	opt := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return g(v)
	}
	for _, r := range runs {
		d := Derive(r, p)
		prof := "0"
		if r.Profiled {
			prof = "1"
		}
		if err := cw.Write([]string{strconv.Itoa(r.Round), strconv.Itoa(r.Ch), r.Target, r.Job, prof, strconv.Itoa(r.Errs),
			f(r.IOPS), g(mib(r)), g(r.LatMean), f(r.P50), f(r.P99), f(r.P999),
			g(d.Window), g(d.GuestIdlePct), g(d.SoftirqPct), g(d.GuestCPUPerIO), g(d.DaemonPct), g(d.DaemonSysPct), g(d.DaemonCPUPerIO),
			opt(d.CtxtPerIO), opt(d.IPIPerIO), opt(d.DaemonReadsPerIO), opt(d.DaemonWritesPerIO),
			opt(d.DaemonVolPerIO), opt(d.DaemonInvolPerIO), opt(d.HostBusyPct),
			opt(d.InsnKernelPerIO), opt(d.InsnUserPerIO), opt(d.SyscallsPerIO)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteSummaryCSV writes one row per metric, ch_count and target.
func (s Summary) WriteSummaryCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"metric", "unit", "ch_count", "target", "median", "min", "max", "n", "ratio_to_lio",
		"paired_ratio_min", "paired_ratio_median", "paired_ratio_max"}); err != nil {
		return err
	}
	g := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	for _, m := range Metrics {
		for _, ch := range s.ChCounts {
			for _, t := range s.Targets {
				c, ok := s.cell(m.Key, ch, t.Key)
				if !ok {
					continue
				}
				pr := stat(s.PairedRatios(m.Key, ch, t.Key))
				if err := cw.Write([]string{m.Key, m.Unit, strconv.Itoa(ch), t.Key, g(c.Median), g(c.Min), g(c.Max),
					strconv.Itoa(c.N), g(s.Ratio(m.Key, ch, t.Key)), g(pr.Min), g(pr.Median), g(pr.Max)}); err != nil {
					return err
				}
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteBetterCSV writes the short summary, two-host-summary.csv (the file archived in
// bench/results/): per metric (job), ch_count and target the median, and the ratio of the medians oriented so that above
// 1 is better for srptarget: srptarget / LIO for IOPS and MiB/s, LIO / srptarget for
// latency and CPU per I/O (empty for LIO). The CPU rows are named JOB/target-cpu-us-per-io
// (the host's CPU, Params.TargetHost) or JOB/guest-cpu-us-per-io, and JOB/daemon-cpu-us-per-io;
// with the target host's counters also JOB/ctxt-per-io (the host's context switches) and the
// daemon's JOB/daemon-vcs-per-io (wake-ups), daemon-ivcs-per-io (preemptions),
// daemon-reads-per-io and daemon-writes-per-io (srptarget only, no ratio); with the
// instruction counts the target VM's JOB/insn-per-io, insn-kernel-per-io, insn-user-per-io
// and syscalls-per-io (net of the idle target's).
func (s Summary) WriteBetterCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"job", "ch_count", "target", "median", "ratio"}); err != nil {
		return err
	}
	g := func(v float64) string {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	type row struct {
		key, name    string
		higherBetter bool
	}
	var rows []row
	for _, m := range Metrics {
		rows = append(rows, row{m.Key, m.Key, m.HigherBetter})
	}
	cpuName := "guest-cpu-us-per-io"
	if s.TargetHost {
		cpuName = "target-cpu-us-per-io"
	}
	for _, m := range Metrics {
		if m.Key != m.Job && m.Key != m.Job+"-mean" {
			continue // one CPU row per job
		}
		rows = append(rows, row{m.Job + "/guest-cpu-us-per-io", m.Job + "/" + cpuName, false},
			row{m.Job + "/daemon-cpu-us-per-io", m.Job + "/daemon-cpu-us-per-io", false})
		if s.TargetHost {
			// what the target host's scheduler and the daemon's system calls do per I/O
			for _, f := range []string{"ctxt-per-io", "daemon-vcs-per-io", "daemon-ivcs-per-io", "daemon-reads-per-io", "daemon-writes-per-io",
				"insn-per-io", "insn-kernel-per-io", "insn-user-per-io", "syscalls-per-io"} {
				rows = append(rows, row{m.Job + "/" + f, m.Job + "/" + f, false})
			}
		}
	}
	for _, r := range rows {
		for _, ch := range s.ChCounts {
			for _, t := range s.Targets {
				c, ok := s.cell(r.key, ch, t.Key)
				if !ok || math.IsNaN(c.Median) || (t.Key == refTarget && strings.HasSuffix(r.key, "/daemon-cpu-us-per-io")) {
					continue
				}
				ratio := math.NaN()
				if t.Key != refTarget {
					ratio = s.Ratio(r.key, ch, t.Key)
					if !r.higherBetter {
						ratio = 1 / ratio
					}
				}
				if err := cw.Write([]string{r.name, strconv.Itoa(ch), t.Key, g(c.Median), g(ratio)}); err != nil {
					return err
				}
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
