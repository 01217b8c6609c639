package main

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// funcOptions say where AttributeFunctions finds its inputs, and for which job.
type funcOptions struct {
	tb     string  // the plugin's per-translation-block counts (tb= file)
	ksyms  string  // the target kernel's text symbols, /proc/kallsyms lines, gzip
	maps   string  // the daemon's executable mappings, /proc/PID/maps lines
	bin    string  // the daemon's binary (not PIE: its addresses are the ELF's)
	root   string  // the guest's shared libraries under their paths
	job    string  // the job attributed
	ch     int     // its ch_count
	top    int     // functions listed
	offset float64 // host epoch - the initiator's uptime
}

// daemonPath is where the two-host bench's target runs the daemon from.
const daemonPath = "/usr/local/bin/srptarget"

// funcKey names the code a translation block starts in.
type funcKey struct{ Name, Object string }

// FuncTarget is one target's instructions on the target VM per I/O of the attributed job,
// net of the idle target's, by function and object, and the calls of a few kernel entry
// points per I/O.
type FuncTarget struct {
	Key     string
	IOs     float64 // the I/Os of the dump intervals counted, estimated from fio's IOPS
	Seconds float64 // their length
	// Scale is what the figures were multiplied by so that Total is the instruction counts'
	// per-I/O figure for the same runs (Run.Insn over Run.InsnIOs): the dumps' I/Os are an
	// estimate, the counts' I/Os come from the initiator's disk. 1 without counts.
	Scale   float64
	Total   float64
	Funcs   map[funcKey]float64
	Objects map[string]float64
	// Events are calls per I/O of kernel entry points (eventFuncs), Syscalls per system call.
	Events   map[string]float64
	Syscalls map[string]float64
}

// FuncReport is the attribution of one job's instructions to functions, LIO's and
// srptarget's (its first daemon, srpt-mem).
type FuncReport struct {
	Job     string
	Ch      int
	Top     int
	Targets []FuncTarget
	// IdleSeconds is the length of the idle dumps whose rate was subtracted (0: none).
	IdleSeconds float64
}

// eventFuncs are kernel functions whose blocks' executions count calls: a block that starts at
// a function's address is its entry (the first of the names the kernel has).
var eventFuncs = []struct{ label, names string }{
	{"system calls", "entry_SYSCALL_64"},
	{"context switches", "__switch_to_asm"},
	{"device interrupts", "asm_common_interrupt"},
	{"timer interrupts", "asm_sysvec_apic_timer_interrupt"},
	{"softirq runs", "handle_softirqs|__do_softirq"},
	{"rxe packets received", "rxe_rcv"},
	{"rxe packets sent", "rxe_xmit_packet"},
}

// tbGroup sums the executions of each block over the dump intervals that fell in one kind
// of window.
type tbGroup struct {
	execs   map[uint32]uint64
	seconds float64
	ios     float64
}

// AttributeFunctions reads the per-block counts and sums, for the runs of the attributed job
// (not the profiled ones: ApplyInsnSamples) and for the idle window, the executions of each block over the dump intervals that lie
// wholly inside them (a run's measured part, from up0 + ramp to up1, where I/O runs at the
// rate fio measured), then names each block's function with the guest's symbols.
func AttributeFunctions(runs []Run, p Params, o funcOptions) (*FuncReport, error) {
	type window struct {
		a, b, iops float64
		group      string
	}
	var wins []window
	counted := map[string][2]float64{} // per target: the counts' net instructions and I/Os
	for _, r := range runs {
		if r.Job == o.job && r.Ch == o.ch && r.Errs == 0 && !r.Profiled && (r.Target == refTarget || r.Target == "srpt-mem") {
			wins = append(wins, window{r.Up0 + p.Ramp, r.Up1, r.IOPS, r.Target})
			if r.HasInsn {
				c := counted[r.Target]
				counted[r.Target] = [2]float64{c[0] + r.Insn[insnKernel] + r.Insn[insnUser], c[1] + r.InsnIOs}
			}
		}
	}
	if len(wins) == 0 {
		return nil, fmt.Errorf("no runs of %s with ch_count %d", o.job, o.ch)
	}
	if p.Idle[1] > p.Idle[0] {
		wins = append(wins, window{p.Idle[0] + 1, p.Idle[1] - 0.5, 0, "idle"})
	}
	groups := map[string]*tbGroup{}
	for _, w := range wins {
		groups[w.group] = &tbGroup{execs: map[uint32]uint64{}}
	}
	f, err := os.Open(o.tb)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rd io.Reader = f
	if strings.HasSuffix(o.tb, ".gz") {
		z, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}
		rd = z
	}
	blocks := map[uint32][2]uint64{} // id: start address, instructions
	var cur *tbGroup
	prev := math.NaN()
	sc := bufio.NewScanner(rd)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		switch {
		case f[0] == "T" && len(f) == 4:
			id, err1 := strconv.ParseUint(f[1], 10, 32)
			va, err2 := strconv.ParseUint(f[2], 16, 64)
			ni, err3 := strconv.ParseUint(f[3], 10, 32)
			if err1 != nil || err2 != nil || err3 != nil {
				return nil, fmt.Errorf("%s:%d: bad block line %q", o.tb, n, line)
			}
			blocks[uint32(id)] = [2]uint64{va, ni}
		case f[0] == "D" && len(f) == 2:
			us, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", o.tb, n, err)
			}
			t := float64(us)/1e6 - o.offset
			cur = nil
			for _, w := range wins {
				if prev >= w.a && t <= w.b {
					cur = groups[w.group]
					cur.seconds += t - prev
					cur.ios += w.iops * (t - prev)
					break
				}
			}
			prev = t
		case len(f) == 2:
			if cur == nil {
				continue
			}
			id, err1 := strconv.ParseUint(f[0], 10, 32)
			x, err2 := strconv.ParseUint(f[1], 10, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%s:%d: bad count line %q", o.tb, n, line)
			}
			cur.execs[uint32(id)] += x
		default:
			return nil, fmt.Errorf("%s:%d: unknown line %q", o.tb, n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", o.tb, err)
	}
	sym, err := loadSymbols(o)
	if err != nil {
		return nil, err
	}
	rep := &FuncReport{Job: o.job, Ch: o.ch, Top: o.top}
	idle := groups["idle"]
	if idle != nil && idle.seconds > 0 {
		rep.IdleSeconds = idle.seconds
	} else {
		idle = nil
	}
	for _, key := range []string{refTarget, "srpt-mem"} {
		g := groups[key]
		if g == nil || g.ios <= 0 {
			continue
		}
		ft := FuncTarget{Key: key, IOs: g.ios, Seconds: g.seconds, Funcs: map[funcKey]float64{},
			Objects: map[string]float64{}, Events: map[string]float64{}, Syscalls: map[string]float64{}}
		add := func(execs map[uint32]uint64, scale float64) {
			for id, x := range execs {
				b, ok := blocks[id]
				if !ok {
					continue
				}
				v := float64(x) * scale
				k := sym.name(b[0])
				ins := v * float64(b[1])
				ft.Funcs[k] += ins
				ft.Objects[k.Object] += ins
				ft.Total += ins
				if ev, ok := sym.events[b[0]]; ok {
					ft.Events[ev] += v
				}
				if sc, ok := sym.syscalls[b[0]]; ok {
					ft.Syscalls[sc] += v
				}
			}
		}
		add(g.execs, 1/g.ios)
		if idle != nil {
			// what the idle target runs in as many seconds, per I/O
			add(idle.execs, -g.seconds/idle.seconds/g.ios)
		}
		ft.Scale = 1
		if c := counted[key]; c[1] > 0 && ft.Total > 0 {
			ft.scale(c[0] / c[1] / ft.Total)
		}
		rep.Targets = append(rep.Targets, ft)
	}
	if len(rep.Targets) == 0 {
		return nil, fmt.Errorf("no per-block dumps inside the runs of %s with ch_count %d", o.job, o.ch)
	}
	return rep, nil
}

// scale multiplies every per-I/O figure by k.
func (t *FuncTarget) scale(k float64) {
	t.Scale *= k
	t.Total *= k
	for _, m := range []map[string]float64{t.Objects, t.Events, t.Syscalls} {
		for key := range m {
			m[key] *= k
		}
	}
	for key := range t.Funcs {
		t.Funcs[key] *= k
	}
}

// shortName drops the module path of the daemon's own Go functions.
func shortName(s string) string {
	return strings.TrimPrefix(s, "github.com/srptarget/srptarget/")
}

type ranked struct {
	k funcKey
	v float64
}

// sortedFuncs returns m's entries, largest absolute value first, names breaking ties.
func sortedFuncs(m map[funcKey]float64) []ranked {
	out := make([]ranked, 0, len(m))
	for k, v := range m {
		out = append(out, ranked{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := math.Abs(out[i].v), math.Abs(out[j].v)
		if a != b {
			return a > b
		}
		if out[i].k.Name != out[j].k.Name {
			return out[i].k.Name < out[j].k.Name
		}
		return out[i].k.Object < out[j].k.Object
	})
	return out
}

func sortedByValue(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

func (r *FuncReport) target(key string) *FuncTarget {
	for i := range r.Targets {
		if r.Targets[i].Key == key {
			return &r.Targets[i]
		}
	}
	return nil
}

// Write writes insn-functions.txt: per target the instructions per I/O by object, the kernel
// entry points' calls and the system calls per I/O, and its top functions; then the
// difference against LIO.
func (r *FuncReport) Write(w io.Writer) error {
	fmt.Fprintf(w, "Instructions on the target VM per I/O of %s, ch_count %d, by function: the per-block counts of\n", r.Job, r.Ch)
	fmt.Fprintln(w, "the dump intervals inside the runs' measured parts (I/Os = fio's IOPS x their length), net of the")
	if r.IdleSeconds > 0 {
		fmt.Fprintf(w, "idle target's (%.1f s of idle dumps, scaled to each target's seconds), then scaled so that the\n", r.IdleSeconds)
	} else {
		fmt.Fprintln(w, "idle target's (none here: gross), then scaled so that the")
	}
	fmt.Fprintln(w, "total is the instruction counts' for the same runs (I/Os from the initiator's disk).")
	for _, t := range r.Targets {
		fmt.Fprintf(w, "\n%s: %.0f instructions per I/O over %.0f I/Os in %.1f s (scaled by %.3f)\n", t.Key, t.Total, t.IOs, t.Seconds, t.Scale)
		fmt.Fprint(w, "  by object:")
		for _, o := range sortedByValue(t.Objects) {
			if math.Abs(t.Objects[o]) >= 0.005*math.Abs(t.Total) {
				fmt.Fprintf(w, " %s %.0f,", o, t.Objects[o])
			}
		}
		fmt.Fprintln(w)
		fmt.Fprint(w, "  calls per I/O:")
		for _, e := range eventFuncs {
			if v, ok := t.Events[e.label]; ok {
				fmt.Fprintf(w, " %s %.2f,", e.label, v)
			}
		}
		fmt.Fprintln(w)
		writeSyscalls(w, "  system calls per I/O:", t.Syscalls)
		for i, f := range sortedFuncs(t.Funcs) {
			if i == r.Top {
				break
			}
			fmt.Fprintf(w, "  %9.0f %5.1f%%  %s [%s]\n", f.v, 100*f.v/t.Total, shortName(f.k.Name), f.k.Object)
		}
	}
	fmt.Fprintln(w)
	return r.WriteDiff(w)
}

// WriteDiff writes the functions where srptarget's instructions per I/O differ most from
// LIO's, as a Markdown table, with the totals by object before it.
func (r *FuncReport) WriteDiff(w io.Writer) error {
	lio, srpt := r.target(refTarget), r.target("srpt-mem")
	if lio == nil || srpt == nil {
		fmt.Fprintf(w, "Instructions by function, %s ch_count %d: not both targets ran inside per-block dumps.\n", r.Job, r.Ch)
		return nil
	}
	fmt.Fprintf(w, "Target VM instructions per I/O by object, %s, ch_count %d (net of the idle target's):\n\n", r.Job, r.Ch)
	writeHeader(w, []string{"object"}, []string{"LIO", "srptarget", "srptarget - LIO"})
	objs := map[string]float64{}
	for o, v := range lio.Objects {
		objs[o] -= v
	}
	for o, v := range srpt.Objects {
		objs[o] += v
	}
	for _, o := range sortedFuncs(keyed(objs)) {
		a, b := lio.Objects[o.k.Name], srpt.Objects[o.k.Name]
		if math.Abs(a) < 0.005*lio.Total && math.Abs(b) < 0.005*srpt.Total {
			continue
		}
		writeRow(w, []string{o.k.Name, fmt.Sprintf("%.0f", a), fmt.Sprintf("%.0f", b), fmt.Sprintf("%+.0f", o.v)})
	}
	writeRow(w, []string{"all", fmt.Sprintf("%.0f", lio.Total), fmt.Sprintf("%.0f", srpt.Total), fmt.Sprintf("%+.0f", srpt.Total-lio.Total)})
	fmt.Fprintf(w, "\nThe %d functions whose instructions per I/O differ most, srptarget - LIO:\n\n", r.Top)
	writeHeader(w, []string{"function", "object"}, []string{"LIO", "srptarget", "difference"})
	d := map[funcKey]float64{}
	for k, v := range lio.Funcs {
		d[k] -= v
	}
	for k, v := range srpt.Funcs {
		d[k] += v
	}
	for i, f := range sortedFuncs(d) {
		if i == r.Top {
			break
		}
		writeRow(w, []string{"`" + shortName(f.k.Name) + "`", f.k.Object, fmt.Sprintf("%.0f", lio.Funcs[f.k]),
			fmt.Sprintf("%.0f", srpt.Funcs[f.k]), fmt.Sprintf("%+.0f", f.v)})
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "Calls per I/O (LIO / srptarget):")
	for _, e := range eventFuncs {
		a, ok1 := lio.Events[e.label]
		b, ok2 := srpt.Events[e.label]
		if ok1 || ok2 {
			fmt.Fprintf(w, " %s %.2f / %.2f;", e.label, a, b)
		}
	}
	fmt.Fprintln(w)
	writeSyscalls(w, "srptarget's system calls per I/O:", srpt.Syscalls)
	return nil
}

// writeSyscalls writes a line of the system calls per I/O of perIO, most first, from 0.005
// up: title, then "name rate," for each.
func writeSyscalls(w io.Writer, title string, perIO map[string]float64) {
	fmt.Fprint(w, title)
	for _, s := range sortedByValue(perIO) {
		if perIO[s] >= 0.005 {
			fmt.Fprintf(w, " %s %.3f,", s, perIO[s])
		}
	}
	fmt.Fprintln(w)
}

// keyed turns a map by name into one by funcKey, for sortedFuncs.
func keyed(m map[string]float64) map[funcKey]float64 {
	out := make(map[funcKey]float64, len(m))
	for k, v := range m {
		out[funcKey{Name: k}] = v
	}
	return out
}
