package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// TargetSample is one line of the two-host bench's target-samples.txt (written by
// integration/vm/bench-2host.sh from guest/bench-2host-target.sh's TGTCPU lines):
//
//	TGTCPU up=U cpu=a,b,.. ctxt=N dproc=utime,stime dio=syscr,syscw dcs=voluntary,involuntary
//	       [vdproc=.. vdio=.. vdcs=..]
//
// (vd: the same counters of the variant daemon, target srpt-mem-NAME, when there is one.)
// U is on the initiator's uptime scale (the host shifted it), so that it compares with the
// up0 and up1 of the initiator's BENCH lines.
type TargetSample struct {
	Up     float64
	CPU    []uint64
	Ctxt   uint64
	Daemon [2]uint64
	IO     [2]uint64
	// CS are the daemon's voluntary and involuntary context switches (all threads); HasCS
	// is false on lines of older target scripts.
	CS    [2]uint64
	HasCS bool
	// V holds the variant daemon's counters (vdproc, vdio, vdcs); HasV: the line has them.
	V    variantSample
	HasV bool
}

// variantSample is the variant daemon's counters of a TGTCPU line.
type variantSample struct {
	Daemon, IO, CS [2]uint64
	HasCS          bool
}

// ParseTargetSample decodes one TGTCPU line.
func ParseTargetSample(line string) (TargetSample, error) { return parseSample(line, "TGTCPU") }

// ParseHostSample decodes one line of the two-host bench's host-samples.txt: the bench
// host's own /proc/stat "cpu" line, every 0.5 s, on the initiator's uptime scale (written by
// integration/vm/bench-2host.sh):
//
//	HOSTCPU up=U cpu=a,b,..
//
// Only Up and CPU are set.
func ParseHostSample(line string) (TargetSample, error) { return parseSample(line, "HOSTCPU") }

// parseSample decodes a line of samples whose first field is tag.
func parseSample(line, tag string) (TargetSample, error) {
	var s TargetSample
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != tag {
		return s, errNotBench
	}
	seen := map[string]bool{}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return s, fmt.Errorf("field %q is not key=value", kv)
		}
		seen[k] = true
		var err error
		switch k {
		case "up":
			s.Up, err = strconv.ParseFloat(v, 64)
		case "cpu":
			s.CPU, err = parseUints(v, 4)
		case "ctxt":
			s.Ctxt, err = strconv.ParseUint(v, 10, 64)
		case "dproc":
			s.Daemon, err = parsePair(v)
		case "dio":
			s.IO, err = parsePair(v)
		case "dcs":
			s.CS, err = parsePair(v)
			s.HasCS = true
		case "vdproc":
			s.V.Daemon, err = parsePair(v)
			s.HasV = true
		case "vdio":
			s.V.IO, err = parsePair(v)
		case "vdcs":
			s.V.CS, err = parsePair(v)
			s.V.HasCS = true
		}
		if err != nil {
			return s, fmt.Errorf("%s: %w", k, err)
		}
	}
	if !seen["up"] || !seen["cpu"] {
		return s, fmt.Errorf("no up= or cpu=")
	}
	return s, nil
}

// readSamples reads the lines of path that parse decodes, skipping the others. A line of its
// kind that does not decode is skipped too, and reported in bad ("path:line: error"): the
// samples come from a VM's serial console, where a kernel message can land in the middle of
// a line (seen: "... dcs=2553,911[ 34.738488] random: crng init done"), and one sample less
// only widens a run's window.
func readSamples(path string, parse func(string) (TargetSample, error)) (out []TargetSample, bad []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		s, err := parse(sc.Text())
		if err == errNotBench {
			continue
		}
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s:%d: %v", path, n, err))
			continue
		}
		out = append(out, s)
	}
	return out, bad, sc.Err()
}

// ApplyHostSamples sets the bench host's CPU counters of each run (HostCPU0, HostCPU1): the
// first and the last host sample inside the run's measured part (from up0 + ramp to up1),
// as ApplyTargetSamples does for the target host's, whose windows they match to a sample
// (both are taken every 0.5 s). Call it before ApplyTargetSamples, which moves up0 and up1.
// Runs without two samples minTargetWindow apart get none; their number is returned.
func ApplyHostSamples(runs []Run, samples []TargetSample, p Params) (missing int) {
	for i := range runs {
		r := &runs[i]
		r.HostCPU0, r.HostCPU1 = nil, nil
		a, b := sampleSpan(samples, r.Up0+p.Ramp, r.Up1)
		if a < 0 || samples[b].Up-samples[a].Up < minTargetWindow || len(samples[a].CPU) != len(samples[b].CPU) {
			missing++
			continue
		}
		r.HostCPU0, r.HostCPU1 = samples[a].CPU, samples[b].CPU
	}
	return missing
}

// sampleSpan returns the indexes of the first and the last sample from start to end, or -1, -1.
func sampleSpan(samples []TargetSample, start, end float64) (a, b int) {
	a, b = -1, -1
	for j, s := range samples {
		if s.Up < start || s.Up > end {
			continue
		}
		if a < 0 {
			a = j
		}
		b = j
	}
	return a, b
}

// minTargetWindow is the shortest span of target samples a run's target CPU figures are
// computed over (s); a run with less gets no CPU figures.
const minTargetWindow = 1.0

// variantPrefix begins the target name of the two-host bench's variant daemon's runs
// (bench-2host-init.sh: srpt-mem-NAME).
const variantPrefix = "srpt-mem-"

// ApplyTargetSamples replaces the CPU counters of each run (the initiator's, taken by fio's
// exec_prerun and exec_postrun) with the target host's: the first and the last sample inside
// the run's measured part (from up0 + ramp to up1), whose span becomes the run's IOWindow.
// The target host's context switches replace the initiator's (no IPI counts: HasIPI false).
// The daemon's counters go to srptarget's runs only (LIO runs in the kernel: 0,0, as in the
// one-VM bench), the variant daemon's (vdproc, ...) to the variant's runs (srpt-mem-NAME); a
// variant run whose samples lack them gets none. Runs without two samples minTargetWindow apart lose their CPU counters;
// their number is returned. samples must be in time order.
func ApplyTargetSamples(runs []Run, samples []TargetSample, p Params) (missing int) {
	for i := range runs {
		r := &runs[i]
		a, b := sampleSpan(samples, r.Up0+p.Ramp, r.Up1)
		r.HasSched, r.HasIPI, r.HasDaemonIO, r.HasDaemonCS = false, false, false, false
		r.Daemon0, r.Daemon1 = [2]uint64{}, [2]uint64{}
		if a < 0 || samples[b].Up-samples[a].Up < minTargetWindow || len(samples[a].CPU) != len(samples[b].CPU) {
			r.CPU0, r.CPU1, r.IOWindow = nil, nil, math.NaN()
			missing++
			continue
		}
		s0, s1 := samples[a], samples[b]
		r.CPU0, r.CPU1 = s0.CPU, s1.CPU
		r.Up0, r.Up1 = s0.Up, s1.Up
		r.IOWindow = s1.Up - s0.Up
		r.Ctxt0, r.Ctxt1, r.HasSched = s0.Ctxt, s1.Ctxt, true
		if strings.HasPrefix(r.Target, variantPrefix) {
			if !s0.HasV || !s1.HasV {
				continue
			}
			r.Daemon0, r.Daemon1 = s0.V.Daemon, s1.V.Daemon
			r.DaemonIO0, r.DaemonIO1 = s0.V.IO, s1.V.IO
			r.HasDaemonIO = true
			if s0.V.HasCS && s1.V.HasCS {
				r.DaemonCS0, r.DaemonCS1, r.HasDaemonCS = s0.V.CS, s1.V.CS, true
			}
		} else if r.Target != refTarget {
			r.Daemon0, r.Daemon1 = s0.Daemon, s1.Daemon
			r.DaemonIO0, r.DaemonIO1 = s0.IO, s1.IO
			r.HasDaemonIO = true
			if s0.HasCS && s1.HasCS {
				r.DaemonCS0, r.DaemonCS1, r.HasDaemonCS = s0.CS, s1.CS, true
			}
		}
	}
	return missing
}
