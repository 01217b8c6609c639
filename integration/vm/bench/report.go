package main

import (
	"math"
	"sort"
	"strings"
)

// userHZ is the unit of /proc/stat and /proc/PID/stat times (USER_HZ, 100 on x86 Linux).
const userHZ = 100

// refTarget is the reference of every ratio: LIO ib_srpt, the kernel's own SRP target.
const refTarget = "lio"

// Target is one target of the benchmark as the BENCH lines name it: LIO, or one LUN of one
// srptarget daemon. guest/bench.sh names srptarget's targets srpt-LUN with one daemon and
// srpt-LUN-MODE with one daemon per completion mode (srpt-mem-adaptive20us: adaptive with
// a poll window of 20us).
type Target struct {
	Key   string // as in the BENCH lines: lio, srpt-mem, srpt-null-poll
	Label string // column title: LIO, srptarget memory, srptarget memory poll
	Short string // column title after the first of a group, and in ratio titles: memory poll
	LUN   string // mem, null; empty for LIO and for names of unknown form
	Mode  string // the completion mode (and poll window), empty with one daemon
}

// lunNames are how the titles name srptarget's LUNs, in the order of the columns.
var lunNames = []struct{ key, name string }{{"mem", "memory"}, {"null", "null"}}

// ParseTarget describes the target that BENCH lines call key.
func ParseTarget(key string) Target {
	if key == refTarget {
		return Target{Key: key, Label: "LIO", Short: "LIO"}
	}
	rest, ok := strings.CutPrefix(key, "srpt-")
	if !ok || rest == "" {
		return Target{Key: key, Label: key, Short: key}
	}
	lun, mode, _ := strings.Cut(rest, "-")
	short := lun
	for _, l := range lunNames {
		if l.key == lun {
			short = l.name
		}
	}
	if mode != "" {
		short += " " + mode
	}
	return Target{Key: key, Label: "srptarget " + short, Short: short, LUN: lun, Mode: mode}
}

// Targets returns the targets of the runs in the order of every table and chart: LIO (even
// when no run has it: the reference column stays), then srptarget's, the memory LUN before
// the null LUN and, per LUN, the completion modes in the order modes gives them (that of
// guest/bench.sh's srpt_modes); then targets of other names. Ties keep the order in which
// the targets first appear in runs.
func Targets(runs []Run, modes []string) []Target {
	seen := map[string]bool{refTarget: true}
	var found []Target
	for _, r := range runs {
		if !seen[r.Target] {
			seen[r.Target] = true
			found = append(found, ParseTarget(r.Target))
		}
	}
	// sort keys: the LUN's rank (mem, null, other LUNs, not srptarget), the first
	// appearance of the LUN (orders LUNs of other names), the mode's rank, first appearance
	type rank struct{ lun, lunSeen, mode, seen int }
	lunSeen := map[string]int{}
	ranks := map[string]rank{}
	for i, t := range found {
		if _, ok := lunSeen[t.LUN]; !ok {
			lunSeen[t.LUN] = i
		}
		r := rank{lun: len(lunNames), lunSeen: lunSeen[t.LUN], mode: len(modes), seen: i}
		if t.LUN == "" {
			r.lun = len(lunNames) + 1
		}
		for k, l := range lunNames {
			if l.key == t.LUN {
				r.lun = k
			}
		}
		if t.Mode == "" {
			r.mode = -1
		}
		for k, m := range modes {
			if m == t.Mode {
				r.mode = k
			}
		}
		ranks[t.Key] = r
	}
	sort.Slice(found, func(i, j int) bool {
		a, b := ranks[found[i].Key], ranks[found[j].Key]
		switch {
		case a.lun != b.lun:
			return a.lun < b.lun
		case a.lunSeen != b.lunSeen:
			return a.lunSeen < b.lunSeen
		case a.mode != b.mode:
			return a.mode < b.mode
		}
		return a.seen < b.seen
	})
	return append([]Target{ParseTarget(refTarget)}, found...)
}

// Metric is one number a job is judged by.
type Metric struct {
	Key          string // unique, used in CSV and chart files
	Job          string
	Label        string
	Unit         string
	HigherBetter bool
	Value        func(Run) float64
}

func mib(r Run) float64 { return r.BWKiB / 1024 }

// Metrics are the table's rows, per ch_count.
var Metrics = []Metric{
	{"randread-4k-qd32", "randread-4k-qd32", "4 KiB random read, QD 32", "IOPS", true, func(r Run) float64 { return r.IOPS }},
	{"randwrite-4k-qd32", "randwrite-4k-qd32", "4 KiB random write, QD 32", "IOPS", true, func(r Run) float64 { return r.IOPS }},
	{"read-128k-qd32", "read-128k-qd32", "128 KiB sequential read, QD 32", "MiB/s", true, mib},
	{"write-128k-qd32", "write-128k-qd32", "128 KiB sequential write, QD 32", "MiB/s", true, mib},
	{"randread-4k-qd1-mean", "randread-4k-qd1", "4 KiB random read, QD 1: mean latency", "µs", false, func(r Run) float64 { return r.LatMean }},
	{"randread-4k-qd1-p99", "randread-4k-qd1", "4 KiB random read, QD 1: p99 latency", "µs", false, func(r Run) float64 { return r.P99 }},
}

// Params are the job parameters the per-I/O CPU figures need, and the order of the
// completion modes for the columns.
type Params struct {
	Runtime, Ramp float64 // s
	NCPU          int
	// Modes are the names of guest/bench.sh's srpt_modes (adaptive:20us is adaptive20us),
	// in the order given; nil when the guest did not say (then: order of appearance).
	Modes []string
	// TargetHost: the CPU counters are the target host's (the two-host bench,
	// ApplyTargetSamples), not those of the one VM that ran initiator and target.
	TargetHost bool
	// Idle is the initiator's uptime at the start and end of the window in which the two-host
	// bench left the target idle (BENCHINFO idle=), zero without one: IdleRate.
	Idle [2]float64
}

// Derived are the per-run figures computed from the raw counters.
type Derived struct {
	GuestCPUPerIO  float64 // guest CPU (all CPUs, busy) µs per I/O
	DaemonCPUPerIO float64 // the daemon's CPU µs per I/O (0 for LIO)
	GuestIdlePct   float64 // idle share of the guest's CPUs over the window
	SoftirqPct     float64 // softirq share of the guest's CPUs over the window
	DaemonPct      float64 // the daemon's CPU, % of one CPU over the window
	DaemonSysPct   float64 // system share of the daemon's CPU (rxe runs inside its system calls)
	Window         float64 // s between exec_prerun and exec_postrun
	// Per I/O, NaN when the run has no such counters.
	CtxtPerIO         float64 // guest context switches
	IPIPerIO          float64 // guest IPIs (rescheduling, function call, TLB shootdown)
	DaemonReadsPerIO  float64 // the daemon's read() calls (completion channel)
	DaemonWritesPerIO float64 // the daemon's write() calls (soft-RoCE's post-send doorbell, one per ibv_post_send)
	DaemonVolPerIO    float64 // the daemon's voluntary context switches (sleeps, so wake-ups)
	DaemonInvolPerIO  float64 // the daemon's involuntary context switches (preempted)
	// HostBusyPct: busy share of the two-host bench's host CPUs (the machine that runs both
	// VMs) over the window; NaN without host samples.
	HostBusyPct float64
	// The target VM's guest instructions in the kernel and in user space, and its system
	// calls, per I/O, net of the idle target's (Run.Insn); NaN without instruction counts.
	InsnKernelPerIO, InsnUserPerIO, SyscallsPerIO float64
}

// Derive computes r's CPU figures. The counters cover the window from exec_prerun to
// exec_postrun (ramp + runtime, plus fio's own set-up and tear-down); the I/O count is
// IOPS × (ramp + runtime), assuming the ramp ran at the measured rate.
func Derive(r Run, p Params) Derived {
	busy, total, _, softirq := r.CPUTicks()
	nan := math.NaN()
	d := Derived{Window: r.Up1 - r.Up0, CtxtPerIO: nan, IPIPerIO: nan, DaemonReadsPerIO: nan, DaemonWritesPerIO: nan,
		DaemonVolPerIO: nan, DaemonInvolPerIO: nan, HostBusyPct: nan,
		InsnKernelPerIO: nan, InsnUserPerIO: nan, SyscallsPerIO: nan}
	if r.HasInsn && r.InsnIOs > 0 {
		d.InsnKernelPerIO = r.Insn[insnKernel] / r.InsnIOs
		d.InsnUserPerIO = r.Insn[insnUser] / r.InsnIOs
		d.SyscallsPerIO = r.Insn[insnSyscall] / r.InsnIOs
	}
	if r.HostCPU0 != nil {
		if hb, ht, _, _ := statTicks(r.HostCPU0, r.HostCPU1); ht > 0 {
			d.HostBusyPct = 100 * hb / ht
		}
	}
	ios := r.IOPS * (p.Runtime + p.Ramp)
	if r.IOWindow > 0 {
		ios = r.IOPS * r.IOWindow
	} else if math.IsNaN(r.IOWindow) { // no target samples for this run
		d.GuestCPUPerIO, d.DaemonCPUPerIO, d.GuestIdlePct, d.SoftirqPct, d.DaemonPct = nan, nan, nan, nan, nan
		return d
	}
	if ios > 0 {
		if ctxt, ipis, ok := r.SchedCounts(); ok {
			d.CtxtPerIO = ctxt / ios
			if r.HasIPI {
				d.IPIPerIO = ipis / ios
			}
		}
		if vol, invol, ok := r.DaemonSwitches(); ok {
			d.DaemonVolPerIO, d.DaemonInvolPerIO = vol/ios, invol/ios
		}
		if rd, wr, ok := r.DaemonSyscalls(); ok {
			d.DaemonReadsPerIO, d.DaemonWritesPerIO = rd/ios, wr/ios
		}
		d.GuestCPUPerIO = busy / userHZ / ios * 1e6
		d.DaemonCPUPerIO = r.DaemonTicks() / userHZ / ios * 1e6
	}
	if total > 0 {
		d.GuestIdlePct = 100 * (total - busy) / total
		d.SoftirqPct = 100 * softirq / total
	}
	if d.Window > 0 {
		d.DaemonPct = 100 * r.DaemonTicks() / userHZ / d.Window
	}
	if dt := r.DaemonTicks(); dt > 0 && r.Daemon1[1] >= r.Daemon0[1] {
		d.DaemonSysPct = 100 * float64(r.Daemon1[1]-r.Daemon0[1]) / dt
	}
	return d
}

// Median of vs (the mean of the middle two for an even count); NaN for none.
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// GeoMean is the geometric mean of positive vs, NaN for none: the mean of ratios that treats
// 0.5 and 2 alike.
func GeoMean(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, v := range vs {
		sum += math.Log(v)
	}
	return math.Exp(sum / float64(len(vs)))
}

// Stat is the median, minimum and maximum over the rounds of one cell.
type Stat struct {
	Median, Min, Max float64
	N                int
}

func stat(vs []float64) Stat {
	if len(vs) == 0 {
		return Stat{math.NaN(), math.NaN(), math.NaN(), 0}
	}
	s := Stat{Median: Median(vs), Min: vs[0], Max: vs[0], N: len(vs)}
	for _, v := range vs {
		s.Min = math.Min(s.Min, v)
		s.Max = math.Max(s.Max, v)
	}
	return s
}

// cellKey names one cell of the summary: a metric (or CPU figure), a ch_count, a target.
type cellKey struct {
	metric string
	ch     int
	target string
}

// Summary holds the statistics of every cell, over the runs without transport errors.
type Summary struct {
	Cells map[cellKey]Stat
	// Targets are the columns, LIO first (see Targets).
	Targets []Target
	// PerRound holds each metric's and CPU figure's value per round, for the paired ratios.
	PerRound map[cellKey]map[int]float64
	ChCounts []int
	Excluded int // runs left out because ib_srp logged transport errors during them
	Runs     int
	// TargetHost: the CPU figures are the target host's (Params.TargetHost).
	TargetHost bool
}

// CPU figures summarised alongside the metrics.
var cpuFigures = []struct {
	key   string
	value func(Derived) float64
}{
	{"guest-cpu-us-per-io", func(d Derived) float64 { return d.GuestCPUPerIO }},
	{"daemon-cpu-us-per-io", func(d Derived) float64 { return d.DaemonCPUPerIO }},
	{"guest-idle-pct", func(d Derived) float64 { return d.GuestIdlePct }},
	{"daemon-pct", func(d Derived) float64 { return d.DaemonPct }},
	{"ctxt-per-io", func(d Derived) float64 { return d.CtxtPerIO }},
	{"ipi-per-io", func(d Derived) float64 { return d.IPIPerIO }},
	{"daemon-reads-per-io", func(d Derived) float64 { return d.DaemonReadsPerIO }},
	{"daemon-writes-per-io", func(d Derived) float64 { return d.DaemonWritesPerIO }},
	{"daemon-vcs-per-io", func(d Derived) float64 { return d.DaemonVolPerIO }},
	{"daemon-ivcs-per-io", func(d Derived) float64 { return d.DaemonInvolPerIO }},
	{"host-busy-pct", func(d Derived) float64 { return d.HostBusyPct }},
	{"insn-per-io", func(d Derived) float64 { return d.InsnKernelPerIO + d.InsnUserPerIO }},
	{"insn-kernel-per-io", func(d Derived) float64 { return d.InsnKernelPerIO }},
	{"insn-user-per-io", func(d Derived) float64 { return d.InsnUserPerIO }},
	{"syscalls-per-io", func(d Derived) float64 { return d.SyscallsPerIO }},
}

// Summarize groups the runs into cells.
func Summarize(runs []Run, p Params) Summary {
	vals := map[cellKey][]float64{}
	chs := map[int]bool{}
	s := Summary{Cells: map[cellKey]Stat{}, PerRound: map[cellKey]map[int]float64{}, Runs: len(runs),
		Targets: Targets(runs, p.Modes), TargetHost: p.TargetHost}
	for _, r := range runs {
		if r.Errs > 0 {
			s.Excluded++
			continue
		}
		chs[r.Ch] = true
		for _, m := range Metrics {
			if m.Job == r.Job {
				k := cellKey{m.Key, r.Ch, r.Target}
				vals[k] = append(vals[k], m.Value(r))
				s.setRound(k, r.Round, m.Value(r))
			}
		}
		d := Derive(r, p)
		for _, c := range cpuFigures {
			if v := c.value(d); !math.IsNaN(v) {
				k := cellKey{r.Job + "/" + c.key, r.Ch, r.Target}
				vals[k] = append(vals[k], v)
				s.setRound(k, r.Round, v)
			}
		}
	}
	for k, v := range vals {
		s.Cells[k] = stat(v)
	}
	for ch := range chs {
		s.ChCounts = append(s.ChCounts, ch)
	}
	sort.Ints(s.ChCounts)
	return s
}

// Ratio returns the median of target over the median of LIO for a metric, NaN if either
// is missing.
func (s Summary) Ratio(metric string, ch int, target string) float64 {
	a, ok1 := s.Cells[cellKey{metric, ch, target}]
	b, ok2 := s.Cells[cellKey{metric, ch, refTarget}]
	if !ok1 || !ok2 || b.Median == 0 {
		return math.NaN()
	}
	return a.Median / b.Median
}

func (s Summary) setRound(k cellKey, round int, v float64) {
	if s.PerRound[k] == nil {
		s.PerRound[k] = map[int]float64{}
	}
	s.PerRound[k][round] = v
}

// PairedRatios returns, per round in which both ran, target over LIO: a target's block and
// the LIO block of the same round and ch_count, which ran right after the srptarget
// blocks of that round and saw nearly the same host load.
func (s Summary) PairedRatios(metric string, ch int, target string) []float64 {
	return s.pairedAgainst(metric, ch, target, refTarget)
}

// pairedAgainst returns, sorted, target over base per round in which both ran.
func (s Summary) pairedAgainst(metric string, ch int, target, base string) []float64 {
	a, b := s.PerRound[cellKey{metric, ch, target}], s.PerRound[cellKey{metric, ch, base}]
	var out []float64
	for round, v := range a {
		if ref, ok := b[round]; ok && ref != 0 {
			out = append(out, v/ref)
		}
	}
	sort.Float64s(out)
	return out
}

func (s Summary) cell(metric string, ch int, target string) (Stat, bool) {
	c, ok := s.Cells[cellKey{metric, ch, target}]
	return c, ok
}
