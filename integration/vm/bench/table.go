package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// fmtNum prints a value with precision that suits its size.
func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// srptTargets are the targets other than LIO.
func (s Summary) srptTargets() []Target {
	var out []Target
	for _, t := range s.Targets {
		if t.Key != refTarget {
			out = append(out, t)
		}
	}
	return out
}

// hasModes tells whether srptarget ran one daemon per completion mode.
func (s Summary) hasModes() bool {
	for _, t := range s.Targets {
		if t.Mode != "" {
			return true
		}
	}
	return false
}

// writeRow writes one Markdown table row.
func writeRow(w io.Writer, cells []string) {
	fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
}

// writeHeader writes a Markdown table header: left-aligned columns, then right-aligned ones.
func writeHeader(w io.Writer, left, right []string) {
	writeRow(w, append(append([]string(nil), left...), right...))
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(left))+strings.Repeat("---:|", len(right)))
}

// WriteTable writes the Markdown tables: the metrics with a column per target and a ratio
// to LIO per srptarget target, then the CPU figures.
func (s Summary) WriteTable(w io.Writer) {
	var cols []string
	for _, t := range s.Targets {
		cols = append(cols, t.Label)
		if t.Key != refTarget {
			cols = append(cols, t.Short+" / LIO")
		}
	}
	writeHeader(w, []string{"job", "unit", "ch_count"}, cols)
	for _, m := range Metrics {
		for _, ch := range s.ChCounts {
			row := []string{m.Label, m.Unit, strconv.Itoa(ch)}
			has := false
			for _, t := range s.Targets {
				c, ok := s.cell(m.Key, ch, t.Key)
				has = has || ok
				if !ok {
					row = append(row, "-")
				} else {
					row = append(row, fmt.Sprintf("%s (%s-%s)", fmtNum(c.Median), fmtNum(c.Min), fmtNum(c.Max)))
				}
				if t.Key != refTarget {
					r := fmtRatio(s.Ratio(m.Key, ch, t.Key))
					if p := s.PairedRatios(m.Key, ch, t.Key); len(p) > 1 {
						r += fmt.Sprintf(" (%s-%s)", fmtRatio(p[0]), fmtRatio(p[len(p)-1]))
					}
					row = append(row, r)
				}
			}
			if has { // a job that did not run (guest argument jobs=) has no row
				writeRow(w, row)
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Medians over the rounds (minimum-maximum in brackets). Ratio = srptarget / LIO of the medians:")
	fmt.Fprintln(w, "above 1 is better for IOPS and MiB/s, worse for latency; in brackets the lowest and highest ratio of")
	fmt.Fprintln(w, "one round's srptarget block to the LIO block run right after it (same round and ch_count).")
	switch {
	case s.hasModes() && s.TargetHost:
		// bench-2host-init.sh's variant= (a second daemon: another environment, limits or binary)
		fmt.Fprintln(w, "srptarget ran two daemons, the default and the variant (guest argument variant=), each with its")
		fmt.Fprintln(w, "own memory LUN; per round and ch_count both blocks ran, the two taking turns at going first,")
		fmt.Fprintln(w, "then LIO's.")
	case s.hasModes():
		fmt.Fprintln(w, "srptarget ran one daemon per completion mode (limits.completion; a name such as adaptive20us")
		fmt.Fprintln(w, "means adaptive with poll_window 20us), each with its own memory and null LUN; per round and")
		fmt.Fprintln(w, "ch_count every daemon's block ran, in an order rotated by one each round, then LIO's.")
	}
	if s.Excluded > 0 {
		fmt.Fprintf(w, "%d of %d runs left out: ib_srp logged transport errors during them.\n", s.Excluded, s.Runs)
	}
	fmt.Fprintln(w)
	if s.TargetHost {
		groups := []figureCols{
			{key: "guest-cpu-us-per-io", title: "target host CPU µs/I/O", long: true},
			{key: "daemon-cpu-us-per-io", title: "daemon CPU µs/I/O", srpt: true},
			{key: "guest-idle-pct", title: "target host idle %"},
		}
		host := s.hasFigure("host-busy-pct")
		if host {
			groups = append(groups, figureCols{key: "host-busy-pct", title: "bench host busy %"})
		}
		s.writeFigureTable(w, groups)
		writeNote(w,
			"CPU per I/O: busy CPU time of the target's host (its VM's vCPUs: the target, rxe, virtio-net)",
			"over the I/Os of the job's measured part, from the target's /proc/stat sampled every 0.5 s;",
			"daemon: srptarget's own user + system time (including the rxe work the kernel does inside its",
			"system calls). Idle: share of the target host's vCPUs idle during the job.",
		)
		if host {
			fmt.Fprintln(w, "Bench host busy: share of the CPUs of the machine that runs both VMs busy during the job")
			fmt.Fprintln(w, "(its /proc/stat, every 0.5 s); near 100 the VMs compete for them, and what the target VM")
			fmt.Fprintln(w, "spends the initiator VM does not get.")
		}
	} else {
		s.writeFigureTable(w, []figureCols{
			{key: "guest-cpu-us-per-io", title: "guest CPU µs/I/O", long: true},
			{key: "daemon-cpu-us-per-io", title: "daemon CPU µs/I/O", srpt: true},
			{key: "guest-idle-pct", title: "guest idle %"},
		})
		writeNote(w,
			"CPU per I/O: busy guest CPU time (both vCPUs: fio, ib_srp, rxe, the target) over the I/Os of",
			"ramp + runtime; daemon: srptarget's own user + system time (including the rxe work the kernel does",
			"inside its ibv_post_send system calls). Idle: share of both vCPUs idle during the job.",
		)
	}
	s.writeInsnTable(w)
	s.writeVariantTable(w)
	if !s.hasFigure("ctxt-per-io") {
		return
	}
	ctxtCols := []figureCols{
		{key: "ctxt-per-io", title: "context switches/I/O", long: true},
		{key: "ipi-per-io", title: "IPIs/I/O", long: true},
	}
	note := []string{
		"Guest-wide context switches and IPIs (rescheduling, function call, TLB shootdown) per I/O; the",
		"daemon's read() (completion-channel events) and write() (soft-RoCE's post-send doorbell, one per",
		"ibv_post_send) system calls per I/O, all threads.",
	}
	if s.TargetHost {
		ctxtCols = []figureCols{
			{key: "ctxt-per-io", title: "target host context switches/I/O", long: true},
			{key: "daemon-vcs-per-io", title: "daemon wake-ups/I/O", srpt: true},
			{key: "daemon-ivcs-per-io", title: "daemon preemptions/I/O", srpt: true},
		}
		note = []string{
			"Target host: context switches of its vCPU (/proc/stat ctxt) per I/O. Daemon, all threads: wake-ups",
			"are its voluntary context switches (each sleep ends with one), preemptions its involuntary ones",
			"(/proc/PID/task/*/status); read() are completion-channel events, write() soft-RoCE's post-send",
			"doorbells, one per ibv_post_send (/proc/PID/io syscr, syscw). Futex, epoll and the CQ re-arm's",
			"system calls are not counted.",
		}
	}
	fmt.Fprintln(w)
	s.writeFigureTable(w, append(ctxtCols, daemonSyscallCols...))
	writeNote(w, note...)
}

// writeNote writes the note under a table: an empty line, then lines.
func writeNote(w io.Writer, lines ...string) {
	fmt.Fprintln(w)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// daemonSyscallCols are the daemon's system calls per I/O, the last columns of both tables of
// context switches.
var daemonSyscallCols = []figureCols{
	{key: "daemon-reads-per-io", title: "daemon read()/I/O", srpt: true},
	{key: "daemon-writes-per-io", title: "daemon write()/I/O", srpt: true},
}

// writeInsnTable writes the target VM's guest instructions per I/O (the qemu plugin's counts,
// net of the idle target's), kernel and user apart, with each srptarget target's ratio to
// LIO, and the system calls and context switches per I/O beside them.
func (s Summary) writeInsnTable(w io.Writer) {
	if !s.hasFigure("insn-per-io") {
		return
	}
	fmt.Fprintln(w)
	s.writeFigureTable(w, []figureCols{
		{key: "insn-per-io", title: "instructions/I/O (k)", scale: 1e-3, ratio: true, long: true},
		{key: "insn-kernel-per-io", title: "kernel (k)", scale: 1e-3},
		{key: "insn-user-per-io", title: "user (k)", scale: 1e-3},
		{key: "syscalls-per-io", title: "system calls/I/O"},
		{key: "ctxt-per-io", title: "context switches/I/O"},
	})
	writeNote(w,
		"Guest instructions the target VM executed per I/O (counted by the qemu plugin integration/vm/insn/insn.c),",
		"kernel and user apart, from the job's start to its end, the ramp included, divided by the I/Os the",
		"initiator's disk completed in that time, less what the idle target executes in as long (timer ticks,",
		"the sampler); system calls the same way (user blocks that end in SYSCALL). The ratio is srptarget /",
		"LIO of the medians, below 1 is better, in brackets the lowest and highest per-round ratio; not",
		"counted in the round whose srptarget blocks were profiled. Context switches: the target host's",
		"/proc/stat over the measured part.",
	)
}

// writeVariantTable compares, when srptarget ran more than one daemon (completion modes, or
// the two-host bench's variant), each daemon's target with the first daemon's target of the
// same LUN, round by round: their blocks ran one right after the other, so a pair sees nearly
// the same host load, which the medians of a noisy host do not. Per metric and per job's
// target host CPU per I/O: the geometric mean of the per-round ratios and in how many rounds
// the other daemon did better.
func (s Summary) writeVariantTable(w io.Writer) {
	type pair struct{ t, base Target }
	var pairs []pair
	first := map[string]Target{}
	for _, t := range s.srptTargets() {
		if b, ok := first[t.LUN]; ok {
			pairs = append(pairs, pair{t, b})
		} else {
			first[t.LUN] = t
		}
	}
	if len(pairs) == 0 {
		return
	}
	// The metrics, each job's followed by its target host CPU per I/O.
	var rows []Metric
	for i, m := range Metrics {
		rows = append(rows, m)
		if i+1 == len(Metrics) || Metrics[i+1].Job != m.Job {
			job, _, _ := strings.Cut(m.Label, ":")
			rows = append(rows, Metric{Key: m.Job + "/guest-cpu-us-per-io", Job: m.Job, Label: job + ": CPU per I/O", Unit: "µs"})
			if s.hasFigure("insn-per-io") {
				rows = append(rows, Metric{Key: m.Job + "/insn-per-io", Job: m.Job, Label: job + ": instructions per I/O", Unit: "insn"})
			}
		}
	}
	var cols []string
	for _, p := range pairs {
		cols = append(cols, p.t.Short+" / "+p.base.Short)
	}
	fmt.Fprintln(w)
	writeHeader(w, []string{"job", "unit", "ch_count"}, cols)
	for _, r := range rows {
		for _, ch := range s.ChCounts {
			row := []string{r.Label, r.Unit, strconv.Itoa(ch)}
			has := false
			for _, p := range pairs {
				ratios := s.pairedAgainst(r.Key, ch, p.t.Key, p.base.Key)
				if len(ratios) == 0 {
					row = append(row, "-")
					continue
				}
				has = true
				better := 0
				for _, v := range ratios {
					if (r.HigherBetter && v > 1) || (!r.HigherBetter && v < 1) {
						better++
					}
				}
				row = append(row, fmt.Sprintf("%s (better in %d of %d)", fmtRatio(GeoMean(ratios)), better, len(ratios)))
			}
			if has {
				writeRow(w, row)
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each other daemon against the first, LUN by LUN and round by round (their blocks ran one after")
	fmt.Fprintln(w, "the other): the geometric mean of the per-round ratios, and in how many rounds the other did")
	fmt.Fprintln(w, "better (more IOPS or MiB/s, less latency, CPU or instructions per I/O; CPU per I/O is the target host's).")
}

// figureCols is one group of columns of a figure table: a figure, one column per target.
type figureCols struct {
	key   string
	title string // heads the group's first column: "title: LIO"
	srpt  bool   // srptarget's targets only (a figure of the daemon)
	long  bool   // srptarget's columns titled "srptarget memory", not "memory"
	// scale multiplies the medians (1 when 0); ratio adds a column per srptarget target with
	// its ratio to LIO and the range of the paired rounds' ratios.
	scale float64
	ratio bool
}

func (s Summary) hasFigure(key string) bool {
	for k := range s.Cells {
		if strings.HasSuffix(k.metric, "/"+key) {
			return true
		}
	}
	return false
}

// writeFigureTable writes a table of figures: one row per job and ch_count, one group of
// columns (the medians per target) per figure.
func (s Summary) writeFigureTable(w io.Writer, groups []figureCols) {
	var head []string
	type col struct {
		key, target string
		scale       float64
		ratio       bool // the target's ratio to LIO, not its median
	}
	var cols []col
	for _, g := range groups {
		ts := s.Targets
		if g.srpt {
			ts = s.srptTargets()
		}
		scale := g.scale
		if scale == 0 {
			scale = 1
		}
		for i, t := range ts {
			name := t.Short
			if g.long {
				name = t.Label
			}
			if i == 0 {
				name = g.title + ": " + name
			}
			head = append(head, name)
			cols = append(cols, col{g.key, t.Key, scale, false})
		}
		if g.ratio {
			for _, t := range s.srptTargets() {
				head = append(head, t.Short+" / LIO")
				cols = append(cols, col{g.key, t.Key, 1, true})
			}
		}
	}
	writeHeader(w, []string{"job", "ch_count"}, head)
	seen := map[string]bool{}
	for _, m := range Metrics {
		if seen[m.Job] {
			continue
		}
		seen[m.Job] = true
		for _, ch := range s.ChCounts {
			row := []string{m.Job, strconv.Itoa(ch)}
			has := false
			for _, c := range cols {
				metric := m.Job + "/" + c.key
				if c.ratio {
					r := fmtRatio(s.Ratio(metric, ch, c.target))
					if p := s.PairedRatios(metric, ch, c.target); len(p) > 1 {
						r += fmt.Sprintf(" (%s-%s)", fmtRatio(p[0]), fmtRatio(p[len(p)-1]))
					}
					row = append(row, r)
				} else if st, ok := s.cell(metric, ch, c.target); ok {
					row = append(row, fmtNum(st.Median*c.scale))
					has = true
				} else {
					row = append(row, "-")
				}
			}
			if has {
				writeRow(w, row)
			}
		}
	}
}
