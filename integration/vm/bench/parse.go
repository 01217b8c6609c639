package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Fields of fio's terse output, version 3 (1-based, as fio's HOWTO numbers them). The read
// status occupies fields 6-46 and the write status the same 41 fields from 47.
const (
	terseVersionField = 1
	terseErrorField   = 5
	terseReadBase     = 6  // first field of the read status: KiB transferred
	terseWriteBase    = 47 // first field of the write status
	terseDirFields    = 41

	// Offsets inside one direction's status.
	offBWKiB    = 1  // bandwidth, KiB/s
	offIOPS     = 2  // IOPS
	offPctFirst = 12 // first of 20 "P%=V" percentile fields (total latency with --lat_percentiles=1), µs
	offPctCount = 20
	offLatMean  = 34 // total latency mean, µs

	terseMinFields = terseWriteBase + terseDirFields - 1 // through the last field of the write status
)

// Run is one fio run of the benchmark: where it ran, what fio measured in the direction of
// the job, and the CPU counters taken by fio's exec_prerun and exec_postrun.
type Run struct {
	Round    int
	Ch       int
	Target   string // lio, srpt-mem, srpt-null; srpt-mem-MODE, srpt-null-MODE with a daemon per mode
	Job      string // randread-4k-qd32, ...
	Profiled bool   // the daemon wrote a CPU profile during this run
	Errs     int    // ib_srp transport error lines logged during the run

	Write   bool    // the job writes (its numbers come from fio's write status)
	IOPS    float64 // I/O per second
	BWKiB   float64 // KiB/s
	LatMean float64 // µs, total latency (submission to completion)
	P50     float64 // µs
	P99     float64 // µs
	P999    float64 // µs

	CPU0, CPU1 []uint64 // the "cpu" line of /proc/stat, clock ticks
	// HostCPU0, HostCPU1: the two-host bench's host (the machine that runs both VMs), its
	// /proc/stat "cpu" line over the same window (ApplyHostSamples); nil without.
	HostCPU0, HostCPU1 []uint64
	Daemon0, Daemon1   [2]uint64 // the daemon's utime, stime, clock ticks
	Up0, Up1           float64   // guest uptime, s
	// IOWindow, when above 0, is the span (s) the CPU counters cover, for the I/O count
	// (IOPS × IOWindow) instead of ramp + runtime; NaN: the run has no CPU counters
	// (ApplyTargetSamples).
	IOWindow float64

	// Optional counters (lines of older guest scripts lack them; Has* tells).
	HasSched             bool
	Ctxt0, Ctxt1         uint64    // guest context switches
	IRQ0, IRQ1           [3]uint64 // rescheduling, function-call and TLB-shootdown IPIs
	HasDaemonIO          bool
	DaemonIO0, DaemonIO1 [2]uint64 // the daemon's read() and write() system calls
	// HasIPI is false when HasSched counts context switches only (the two-host bench's
	// target samples have no IPI counts).
	HasIPI bool
	// HasDaemonCS: DaemonCS0 and DaemonCS1 hold the daemon's voluntary and involuntary
	// context switches, summed over its threads (/proc/PID/task/*/status). A voluntary switch
	// is a sleep, and each sleep ends with a wake-up: voluntary switches count wake-ups.
	HasDaemonCS          bool
	DaemonCS0, DaemonCS1 [2]uint64
	// HasDisk: Disk0 and Disk1 hold the initiator disk's requests and sectors, reads and
	// writes together, at exec_prerun and exec_postrun: the I/Os of the whole job, ramp
	// included.
	HasDisk      bool
	Disk0, Disk1 [2]uint64
	// HasInsn: Insn holds what the target VM executed from up0 to up1, less what it executes
	// idle in as long (ApplyInsnSamples): guest instructions in the kernel and in user space,
	// and system calls; InsnIOs are the I/Os of that window.
	HasInsn bool
	Insn    [insnKinds]float64
	InsnIOs float64
}

// errNotBench marks a line that is not a BENCH line; callers skip those.
var errNotBench = errors.New("not a BENCH line")

// ParseRun decodes one line written by bench_fio_job (guest/bench-lib.sh):
//
//	BENCH round=R ch=C target=T job=J profiled=P errs=N cpu0=a,b,.. dproc0=u,s up0=S cpu1=.. dproc1=.. up1=.. | TERSE
func ParseRun(line string) (Run, error) {
	var r Run
	head, terse, ok := strings.Cut(line, " | ")
	if !ok || !strings.HasPrefix(head, "BENCH ") {
		return r, errNotBench
	}
	seen := map[string]bool{}
	for _, kv := range strings.Fields(head)[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return r, fmt.Errorf("field %q is not key=value", kv)
		}
		if seen[k] {
			return r, fmt.Errorf("key %s twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "round":
			r.Round, err = strconv.Atoi(v)
		case "ch":
			r.Ch, err = strconv.Atoi(v)
		case "target":
			r.Target = v
		case "job":
			r.Job = v
		case "profiled":
			r.Profiled = v == "1"
		case "errs":
			r.Errs, err = strconv.Atoi(v)
		case "cpu0":
			r.CPU0, err = parseUints(v, 4)
		case "cpu1":
			r.CPU1, err = parseUints(v, 4)
		case "dproc0":
			r.Daemon0, err = parsePair(v)
		case "dproc1":
			r.Daemon1, err = parsePair(v)
		case "ctxt0":
			r.Ctxt0, err = strconv.ParseUint(v, 10, 64)
		case "ctxt1":
			r.Ctxt1, err = strconv.ParseUint(v, 10, 64)
		case "irq0":
			r.IRQ0, err = parseTriple(v)
		case "irq1":
			r.IRQ1, err = parseTriple(v)
		case "dio0":
			r.DaemonIO0, err = parsePair(v)
		case "dio1":
			r.DaemonIO1, err = parsePair(v)
		case "disk0":
			r.Disk0, err = parsePair(v)
		case "disk1":
			r.Disk1, err = parsePair(v)
		case "up0":
			r.Up0, err = strconv.ParseFloat(v, 64)
		case "up1":
			r.Up1, err = strconv.ParseFloat(v, 64)
		default:
			// unknown keys are allowed: a newer guest script may add some
		}
		if err != nil {
			return r, fmt.Errorf("%s: %w", k, err)
		}
	}
	for _, k := range []string{"round", "ch", "target", "job", "cpu0", "cpu1", "up0", "up1"} {
		if !seen[k] {
			return r, fmt.Errorf("no %s=", k)
		}
	}
	r.HasSched = seen["ctxt0"] && seen["ctxt1"] && seen["irq0"] && seen["irq1"]
	r.HasIPI = r.HasSched
	r.HasDaemonIO = seen["dio0"] && seen["dio1"]
	r.HasDisk = seen["disk0"] && seen["disk1"]
	if len(r.CPU0) != len(r.CPU1) {
		return r, fmt.Errorf("cpu0 has %d fields, cpu1 %d", len(r.CPU0), len(r.CPU1))
	}
	if r.Up1 < r.Up0 {
		return r, fmt.Errorf("up1 %g before up0 %g", r.Up1, r.Up0)
	}
	r.Write = strings.Contains(r.Job, "write")
	if err := r.parseTerse(terse); err != nil {
		return r, fmt.Errorf("fio terse output: %w", err)
	}
	return r, nil
}

func (r *Run) parseTerse(line string) error {
	f := strings.Split(strings.TrimSpace(line), ";")
	if len(f) < terseMinFields {
		return fmt.Errorf("%d fields, want at least %d", len(f), terseMinFields)
	}
	field := func(n int) string { return f[n-1] }
	if field(terseVersionField) != "3" {
		return fmt.Errorf("terse version %q, want 3", field(terseVersionField))
	}
	if field(terseErrorField) != "0" {
		return fmt.Errorf("fio reported error %s", field(terseErrorField))
	}
	base := terseReadBase
	if r.Write {
		base = terseWriteBase
	}
	num := func(off int) (float64, error) {
		v, err := strconv.ParseFloat(field(base+off), 64)
		if err != nil {
			return 0, fmt.Errorf("field %d: %w", base+off, err)
		}
		return v, nil
	}
	var err error
	if r.BWKiB, err = num(offBWKiB); err != nil {
		return err
	}
	if r.IOPS, err = num(offIOPS); err != nil {
		return err
	}
	if r.LatMean, err = num(offLatMean); err != nil {
		return err
	}
	for i := 0; i < offPctCount; i++ {
		p, v, ok := strings.Cut(field(base+offPctFirst+i), "%=")
		if !ok {
			return fmt.Errorf("field %d: %q is not a percentile", base+offPctFirst+i, field(base+offPctFirst+i))
		}
		val, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("field %d: %w", base+offPctFirst+i, err)
		}
		switch p {
		case "50.000000":
			r.P50 = val
		case "99.000000":
			r.P99 = val
		case "99.900000":
			r.P999 = val
		}
	}
	return nil
}

func parseUints(s string, min int) ([]uint64, error) {
	parts := strings.Split(s, ",")
	if len(parts) < min {
		return nil, fmt.Errorf("%d numbers, want at least %d", len(parts), min)
	}
	out := make([]uint64, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func parseTriple(s string) ([3]uint64, error) {
	v, err := parseUints(s, 3)
	if err != nil {
		return [3]uint64{}, err
	}
	if len(v) != 3 {
		return [3]uint64{}, fmt.Errorf("%d numbers, want 3", len(v))
	}
	return [3]uint64{v[0], v[1], v[2]}, nil
}

func parsePair(s string) ([2]uint64, error) {
	v, err := parseUints(s, 2)
	if err != nil {
		return [2]uint64{}, err
	}
	if len(v) != 2 {
		return [2]uint64{}, fmt.Errorf("%d numbers, want 2", len(v))
	}
	return [2]uint64{v[0], v[1]}, nil
}

// /proc/stat "cpu" columns (proc(5)): user nice system idle iowait irq softirq steal ...
const (
	statUser = iota
	statNice
	statSystem
	statIdle
	statIowait
	statIRQ
	statSoftirq
	statSteal
)

// statDelta returns c1[i]-c0[i], or 0 when the column is absent or went backwards.
func statDelta(c0, c1 []uint64, i int) float64 {
	if i >= len(c0) || i >= len(c1) || c1[i] < c0[i] {
		return 0
	}
	return float64(c1[i] - c0[i])
}

// statTicks returns the busy and total clock ticks between two /proc/stat "cpu" lines, and
// the system and softirq parts of busy.
func statTicks(c0, c1 []uint64) (busy, total, sys, softirq float64) {
	for i := range c0 {
		total += statDelta(c0, c1, i)
	}
	idle := statDelta(c0, c1, statIdle) + statDelta(c0, c1, statIowait)
	// guest and guest_nice (columns 8 and 9) are already counted in user and nice
	for i := 8; i < len(c0); i++ {
		total -= statDelta(c0, c1, i)
	}
	return total - idle, total, statDelta(c0, c1, statSystem) + statDelta(c0, c1, statIRQ), statDelta(c0, c1, statSoftirq)
}

// CPUTicks returns the guest's busy and total clock ticks between the two snapshots, and
// the system and softirq parts of busy.
func (r Run) CPUTicks() (busy, total, sys, softirq float64) { return statTicks(r.CPU0, r.CPU1) }

// DaemonTicks returns the daemon's CPU clock ticks (user + system) between the snapshots.
func (r Run) DaemonTicks() float64 {
	a := r.Daemon0[0] + r.Daemon0[1]
	b := r.Daemon1[0] + r.Daemon1[1]
	if b < a {
		return 0
	}
	return float64(b - a)
}

// diff returns b-a, or 0 when the counter went backwards (it cannot; a reboot would).
func diff(a, b uint64) float64 {
	if b < a {
		return 0
	}
	return float64(b - a)
}

// SchedCounts returns the guest's context switches and IPIs (all three kinds) between the
// snapshots; ok is false when the line has no such counters.
func (r Run) SchedCounts() (ctxt, ipis float64, ok bool) {
	if !r.HasSched {
		return 0, 0, false
	}
	for i := range r.IRQ0 {
		ipis += diff(r.IRQ0[i], r.IRQ1[i])
	}
	return diff(r.Ctxt0, r.Ctxt1), ipis, true
}

// DaemonSwitches returns the daemon's voluntary and involuntary context switches between
// the snapshots.
func (r Run) DaemonSwitches() (vol, invol float64, ok bool) {
	if !r.HasDaemonCS {
		return 0, 0, false
	}
	return diff(r.DaemonCS0[0], r.DaemonCS1[0]), diff(r.DaemonCS0[1], r.DaemonCS1[1]), true
}

// DaemonSyscalls returns the daemon's read() and write() calls between the snapshots.
func (r Run) DaemonSyscalls() (reads, writes float64, ok bool) {
	if !r.HasDaemonIO {
		return 0, 0, false
	}
	return diff(r.DaemonIO0[0], r.DaemonIO1[0]), diff(r.DaemonIO0[1], r.DaemonIO1[1]), true
}
