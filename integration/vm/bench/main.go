// Command bench turns the raw lines of the VM benchmark (integration/vm/guest/bench.sh,
// run by integration/vm/bench.sh) into runs.csv (one row per fio run), summary.csv (median,
// minimum and maximum per job, ch_count and target, and the ratio to LIO), table.md (the
// Markdown tables of docs/benchmarks.md) and the gnuplot data and script of chart.png. For
// the two-host bench it also takes the target host's samples, the instructions the target
// VM executed (-insn, counted by integration/vm/insn/insn.c) and, per translation block, the
// instructions it attributes to functions for one job (-insn-tb: insn-functions.txt).
// The targets are those of the data: LIO, the reference, then srptarget's (one per LUN,
// or one per LUN and completion mode when the guest ran a daemon per mode).
//
//	go run ./integration/vm/bench -raw raw.txt -info info.txt -out DIR
//
// It prints table.md. It is a separate program, not part of the daemon; it needs nothing
// beyond the standard library.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	var o options
	flag.StringVar(&o.raw, "raw", "", "raw BENCH lines (guest/bench.sh output)")
	flag.StringVar(&o.info, "info", "", "BENCHINFO lines (job parameters)")
	flag.StringVar(&o.out, "out", ".", "output directory")
	flag.StringVar(&o.title, "title", "srptarget vs LIO ib_srpt, ib_srp over soft-RoCE, qemu TCG", "chart title")
	flag.StringVar(&o.terminal, "terminal", "set terminal pngcairo size 1950,1150 font 'DejaVu Sans,11'", "gnuplot terminal line")
	flag.StringVar(&o.samples, "target-samples", "", "the two-host bench's target-samples.txt: CPU figures of the target host")
	flag.StringVar(&o.hostSamples, "host-samples", "", "the two-host bench's host-samples.txt: how busy the machine that runs both VMs was")
	flag.StringVar(&o.insn, "insn", "", "the target VM's instruction counts (the qemu plugin's out= file)")
	flag.Float64Var(&o.insnOffset, "insn-offset", 0, "host epoch seconds minus the initiator's uptime, for -insn and -insn-tb")
	flag.StringVar(&o.funcs.tb, "insn-tb", "", "the plugin's per-translation-block counts (tb= file): instructions by function")
	flag.StringVar(&o.funcs.ksyms, "ksyms", "", "the target's kernel text symbols (/proc/kallsyms, gzip)")
	flag.StringVar(&o.funcs.maps, "maps", "", "the daemon's executable mappings (/proc/PID/maps lines)")
	flag.StringVar(&o.funcs.bin, "bin", "", "the daemon's binary, for its symbols")
	flag.StringVar(&o.funcs.root, "root", "", "a copy of the guest's shared libraries the maps name, under their paths")
	flag.StringVar(&o.funcs.job, "insn-job", "randread-4k-qd32", "the job whose instructions are attributed to functions")
	flag.IntVar(&o.funcs.ch, "insn-ch", 1, "its ch_count")
	flag.IntVar(&o.funcs.top, "insn-top", 25, "functions listed per target and in the difference")
	flag.Parse()
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options are the command line's.
type options struct {
	raw, info, out, title, terminal string
	samples, hostSamples            string
	insn                            string
	insnOffset                      float64
	funcs                           funcOptions
}

func run(o options, stdout io.Writer) error {
	if o.raw == "" || o.info == "" {
		return errors.New("-raw and -info are required")
	}
	p, err := readParams(o.info)
	if err != nil {
		return err
	}
	runs, err := readRuns(o.raw)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("%s: no BENCH lines", o.raw)
	}
	// the instruction and host samples before the target samples, which move the runs' windows
	if o.insn != "" {
		samples, err := ReadInsnSamples(o.insn, o.insnOffset)
		if err != nil {
			return err
		}
		if n := ApplyInsnSamples(runs, samples, p); n > 0 {
			fmt.Fprintf(os.Stderr, "bench: %d of %d runs have no instruction counts\n", n, len(runs))
		}
		if _, ok := IdleRate(samples, p); !ok {
			fmt.Fprintln(os.Stderr, "bench: no idle window (BENCHINFO idle=) in the counts: instructions not net of the idle target's")
		}
	}
	if o.hostSamples != "" {
		samples, err := readSamplesWarn(o.hostSamples, ParseHostSample)
		if err != nil {
			return err
		}
		if n := ApplyHostSamples(runs, samples, p); n > 0 {
			fmt.Fprintf(os.Stderr, "bench: %d of %d runs have no host samples: no host figures for them\n", n, len(runs))
		}
	}
	var funcs *FuncReport
	if o.funcs.tb != "" {
		o.funcs.offset = o.insnOffset
		if funcs, err = AttributeFunctions(runs, p, o.funcs); err != nil {
			fmt.Fprintln(os.Stderr, "bench: instructions by function:", err)
			funcs = nil
		}
	}
	if o.samples != "" {
		samples, err := readSamplesWarn(o.samples, ParseTargetSample)
		if err != nil {
			return err
		}
		p.TargetHost = true
		if n := ApplyTargetSamples(runs, samples, p); n > 0 {
			fmt.Fprintf(os.Stderr, "bench: %d of %d runs have no target samples: no CPU figures for them\n", n, len(runs))
		}
	}
	out := o.out
	s := Summarize(runs, p)
	write := func(name string, fn func(io.Writer) error) error {
		f, err := os.Create(filepath.Join(out, name))
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", name, err)
		}
		return f.Close()
	}
	if err := write("runs.csv", func(w io.Writer) error { return WriteRunsCSV(w, runs, p) }); err != nil {
		return err
	}
	if err := write("summary.csv", s.WriteSummaryCSV); err != nil {
		return err
	}
	if p.TargetHost {
		if err := write("two-host-summary.csv", s.WriteBetterCSV); err != nil {
			return err
		}
	}
	if err := write("table.md", func(w io.Writer) error {
		s.WriteTable(w)
		if funcs != nil {
			fmt.Fprintln(w)
			return funcs.WriteDiff(w)
		}
		return nil
	}); err != nil {
		return err
	}
	if funcs != nil {
		if err := write("insn-functions.txt", funcs.Write); err != nil {
			return err
		}
	}
	if err := s.WriteChart(out, o.title, o.terminal); err != nil {
		return err
	}
	s.WriteTable(stdout)
	if funcs != nil {
		fmt.Fprintln(stdout)
		return funcs.WriteDiff(stdout)
	}
	return nil
}

// readParams reads runtime, ramp, the vCPU count and the completion modes (srpt_modes)
// from the BENCHINFO lines.
func readParams(path string) (Params, error) {
	var p Params
	f, err := os.Open(path)
	if err != nil {
		return p, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "BENCHINFO ")
		if rest, ok := strings.CutPrefix(line, "guest_cpu="); ok {
			// "<model name> x N"
			if i := strings.LastIndex(rest, " x "); i >= 0 {
				p.NCPU, _ = strconv.Atoi(strings.TrimSpace(rest[i+3:]))
			}
			continue
		}
		if rest, ok := strings.CutPrefix(line, "srpt_modes="); ok {
			// "event adaptive:20us poll": the BENCH lines name them event, adaptive20us, poll
			for _, m := range strings.Fields(rest) {
				p.Modes = append(p.Modes, strings.ReplaceAll(m, ":", ""))
			}
			continue
		}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "idle":
				a, b, _ := strings.Cut(v, ",")
				p.Idle[0], err = strconv.ParseFloat(a, 64)
				if err == nil {
					p.Idle[1], err = strconv.ParseFloat(b, 64)
				}
			case "runtime":
				p.Runtime, err = strconv.ParseFloat(v, 64)
			case "ramp":
				p.Ramp, err = strconv.ParseFloat(v, 64)
			}
			if err != nil {
				return p, fmt.Errorf("%s: %s: %w", path, kv, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return p, err
	}
	if p.Runtime <= 0 {
		return p, fmt.Errorf("%s: no runtime=", path)
	}
	return p, nil
}

func readRuns(path string) ([]Run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var runs []Run
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		r, err := ParseRun(sc.Text())
		if errors.Is(err, errNotBench) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		runs = append(runs, r)
	}
	return runs, sc.Err()
}

// readSamplesWarn is readSamples, with the lines it skipped as malformed reported on stderr.
func readSamplesWarn(path string, parse func(string) (TargetSample, error)) ([]TargetSample, error) {
	samples, bad, err := readSamples(path, parse)
	for _, b := range bad {
		fmt.Fprintf(os.Stderr, "bench: sample skipped, %s\n", b)
	}
	return samples, err
}
