// Command bench turns the raw lines of the VM benchmark (integration/vm/guest/bench.sh,
// run by integration/vm/bench.sh) into runs.csv (one row per fio run), summary.csv (median,
// minimum and maximum per job, ch_count and target, and the ratio to LIO), table.md (the
// Markdown tables of docs/benchmarks.md) and the gnuplot data and script of chart.png.
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
	raw := flag.String("raw", "", "raw BENCH lines (guest/bench.sh output)")
	info := flag.String("info", "", "BENCHINFO lines (job parameters)")
	out := flag.String("out", ".", "output directory")
	title := flag.String("title", "srptarget vs LIO ib_srpt, ib_srp over soft-RoCE, qemu TCG", "chart title")
	terminal := flag.String("terminal", "set terminal pngcairo size 1950,1150 font 'DejaVu Sans,11'", "gnuplot terminal line")
	samples := flag.String("target-samples", "", "the two-host bench's target-samples.txt: CPU figures of the target host")
	hostSamples := flag.String("host-samples", "", "the two-host bench's host-samples.txt: how busy the machine that runs both VMs was")
	flag.Parse()
	if err := run(*raw, *info, *out, *title, *terminal, *samples, *hostSamples, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(rawPath, infoPath, out, title, terminal, samplesPath, hostSamplesPath string, stdout io.Writer) error {
	if rawPath == "" || infoPath == "" {
		return errors.New("-raw and -info are required")
	}
	p, err := readParams(infoPath)
	if err != nil {
		return err
	}
	runs, err := readRuns(rawPath)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("%s: no BENCH lines", rawPath)
	}
	if hostSamplesPath != "" {
		samples, err := readSamplesWarn(hostSamplesPath, ParseHostSample)
		if err != nil {
			return err
		}
		// before the target samples, which move the runs' windows
		if n := ApplyHostSamples(runs, samples, p); n > 0 {
			fmt.Fprintf(os.Stderr, "bench: %d of %d runs have no host samples: no host figures for them\n", n, len(runs))
		}
	}
	if samplesPath != "" {
		samples, err := readSamplesWarn(samplesPath, ParseTargetSample)
		if err != nil {
			return err
		}
		p.TargetHost = true
		if n := ApplyTargetSamples(runs, samples, p); n > 0 {
			fmt.Fprintf(os.Stderr, "bench: %d of %d runs have no target samples: no CPU figures for them\n", n, len(runs))
		}
	}
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
	if err := write("table.md", func(w io.Writer) error { s.WriteTable(w); return nil }); err != nil {
		return err
	}
	if err := s.WriteChart(out, title, terminal); err != nil {
		return err
	}
	s.WriteTable(stdout)
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
