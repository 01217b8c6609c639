package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// What the qemu plugin counts (integration/vm/insn/insn.c), in the order of its lines.
const (
	insnKernel  = iota // guest instructions executed in the kernel
	insnUser           // in user space
	insnSyscall        // system calls (user blocks that end in SYSCALL)
	insnKinds
)

// InsnSample is one line of the plugin's counts (out=FILE):
//
//	S epoch_us kernel user syscalls
//
// cumulative since qemu started. Up is on the initiator's uptime scale: the host's epoch
// less the offset bench-2host.sh found between the host's clock and the initiator's uptime,
// so that it compares with the up0 and up1 of the BENCH lines.
type InsnSample struct {
	Up float64
	N  [insnKinds]float64
}

// ReadInsnSamples reads the plugin's counts, in time order. offset is the initiator's
// (host epoch seconds - guest uptime).
func ReadInsnSamples(path string, offset float64) ([]InsnSample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []InsnSample
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		s, ok, err := parseInsnSample(sc.Text(), offset)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if ok {
			out = append(out, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Up < out[j].Up })
	return out, nil
}

// parseInsnSample decodes an S or X line; ok is false for the others (the # header).
func parseInsnSample(line string, offset float64) (s InsnSample, ok bool, err error) {
	f := strings.Fields(line)
	if len(f) == 0 || (f[0] != "S" && f[0] != "X") {
		return s, false, nil
	}
	if len(f) != 2+insnKinds {
		return s, false, fmt.Errorf("%d fields, want %d", len(f), 2+insnKinds)
	}
	us, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return s, false, err
	}
	s.Up = float64(us)/1e6 - offset
	for i := range s.N {
		v, err := strconv.ParseUint(f[2+i], 10, 64)
		if err != nil {
			return s, false, err
		}
		s.N[i] = float64(v)
	}
	return s, true, nil
}

// insnAt returns the cumulative counts at up, linear between the samples around it; ok is
// false outside the samples.
func insnAt(samples []InsnSample, up float64) (n [insnKinds]float64, ok bool) {
	i := sort.Search(len(samples), func(i int) bool { return samples[i].Up >= up })
	if i == len(samples) || (i == 0 && samples[0].Up > up) {
		return n, false
	}
	if samples[i].Up == up {
		return samples[i].N, true
	}
	a, b := samples[i-1], samples[i]
	w := (up - a.Up) / (b.Up - a.Up)
	for k := range n {
		n[k] = a.N[k] + (b.N[k]-a.N[k])*w
	}
	return n, true
}

// insnOver returns the counts from a to b.
func insnOver(samples []InsnSample, a, b float64) (n [insnKinds]float64, ok bool) {
	x, ok1 := insnAt(samples, a)
	y, ok2 := insnAt(samples, b)
	if !ok1 || !ok2 || b <= a {
		return n, false
	}
	for k := range n {
		n[k] = y[k] - x[k]
	}
	return n, true
}

// IdleRate returns what the idle target executes per second: the counts over the
// initiator's idle window (Params.Idle), less its first second and last half second (the
// daemons being stopped, the sleep ending). ok is false without a window of 2 s or more.
func IdleRate(samples []InsnSample, p Params) (rate [insnKinds]float64, ok bool) {
	a, b := p.Idle[0]+1, p.Idle[1]-0.5
	if b-a < 2 {
		return rate, false
	}
	n, ok := insnOver(samples, a, b)
	if !ok {
		return rate, false
	}
	for k := range rate {
		rate[k] = n[k] / (b - a)
	}
	return rate, true
}

var blockSize = regexp.MustCompile(`-(\d+)k-`)

// jobBlockSize returns the block size of a job named like randread-4k-qd32, 0 if unknown.
func jobBlockSize(job string) float64 {
	m := blockSize.FindStringSubmatch(job)
	if m == nil {
		return 0
	}
	k, _ := strconv.Atoi(m[1])
	return float64(k) * 1024
}

// runIOs returns the I/Os of the whole run, from up0 to up1: from the initiator disk's
// sectors when the line has them, else IOPS × (ramp + runtime), which assumes that the ramp
// ran at the measured rate.
func runIOs(r Run, p Params) float64 {
	if bs := jobBlockSize(r.Job); r.HasDisk && bs > 0 {
		return diff(r.Disk0[1], r.Disk1[1]) * 512 / bs
	}
	return r.IOPS * (p.Ramp + p.Runtime)
}

// ApplyInsnSamples sets each run's instruction counts (Run.Insn) over its whole window, from
// up0 to up1, less what the target executes idle in as long (IdleRate, when the initiator
// measured it): timer ticks, the sampler and the kernel's own work are paid per second, not
// per I/O. A run during which the daemon wrote a CPU profile gets none: the profiler's
// signals and stack walks, a hundred a second, would count as the daemon's work. Call it
// before ApplyTargetSamples, which moves up0 and up1. It returns the number of runs without
// counts, the profiled ones apart.
func ApplyInsnSamples(runs []Run, samples []InsnSample, p Params) (missing int) {
	idle, _ := IdleRate(samples, p)
	for i := range runs {
		r := &runs[i]
		r.HasInsn = false
		if r.Profiled {
			continue
		}
		n, ok := insnOver(samples, r.Up0, r.Up1)
		ios := runIOs(*r, p)
		if !ok || ios <= 0 {
			missing++
			continue
		}
		for k := range n {
			n[k] -= idle[k] * (r.Up1 - r.Up0)
		}
		r.Insn, r.InsnIOs, r.HasInsn = n, ios, true
	}
	return missing
}
