package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A panel of the chart: some metrics, one cluster of bars (one per target) for each metric
// and ch_count, with the minimum-maximum of the rounds as error bars.
type panel struct {
	file, title, ylabel string
	metrics             []string
	short               []string // x labels, parallel to metrics
	rotate              bool     // slanted x labels (many clusters)
}

var panels = []panel{
	{"iops.dat", "4 KiB random, QD 32", "IOPS", []string{"randread-4k-qd32", "randwrite-4k-qd32"}, []string{"read", "write"}, false},
	{"mibs.dat", "128 KiB sequential, QD 32", "MiB/s", []string{"read-128k-qd32", "write-128k-qd32"}, []string{"read", "write"}, false},
	{"latmean.dat", "4 KiB random read, QD 1: mean latency (lower is better)", "µs", []string{"randread-4k-qd1-mean"}, []string{"mean"}, false},
	{"latp99.dat", "4 KiB random read, QD 1: p99 latency (lower is better)", "µs", []string{"randread-4k-qd1-p99"}, []string{"p99"}, false},
	{"cpu.dat", "guest CPU per I/O, both vCPUs (lower is better)", "µs", []string{
		"randread-4k-qd32/guest-cpu-us-per-io", "randwrite-4k-qd32/guest-cpu-us-per-io", "randread-4k-qd1/guest-cpu-us-per-io"},
		[]string{"4k rr qd32", "4k rw qd32", "4k rr qd1"}, true},
}

// ratioShort are the x labels of the ratio panel, by metric key.
var ratioShort = map[string]string{
	"randread-4k-qd32":     "4k rr qd32",
	"randwrite-4k-qd32":    "4k rw qd32",
	"read-128k-qd32":       "128k r qd32",
	"write-128k-qd32":      "128k w qd32",
	"randread-4k-qd1-mean": "qd1 lat mean",
	"randread-4k-qd1-p99":  "qd1 lat p99",
}

// relative is how srptarget does against LIO with higher always better: the ratio of the
// medians for IOPS and MiB/s, its inverse for latency.
func (s Summary) relative(m Metric, ch int, target string) float64 {
	r := s.Ratio(m.Key, ch, target)
	if !m.HigherBetter {
		return 1 / r
	}
	return r
}

func datNum(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// WriteChart writes the gnuplot data files and chart.gp into dir; `gnuplot chart.gp` run
// in dir draws chart.png. terminal is the gnuplot terminal line (pngcairo or png). Every
// data file is written; chart.gp plots only the panels that have at least one value (a
// panel without any makes gnuplot stop with "x range is invalid"), and only their rows
// that have one.
func (s Summary) WriteChart(dir, title, terminal string) error {
	var drawn []panel
	for _, p := range panels {
		if s.TargetHost && p.file == "cpu.dat" {
			p.title = "target host CPU per I/O (lower is better)"
		}
		var b strings.Builder
		fmt.Fprintln(&b, "# label, then median min max for: "+s.targetKeys(s.Targets))
		rows := 0
		for i, m := range p.metrics {
			for _, ch := range s.ChCounts {
				var vals strings.Builder
				has := false
				for _, t := range s.Targets {
					c, ok := s.cell(m, ch, t.Key)
					if !ok {
						c = Stat{math.NaN(), math.NaN(), math.NaN(), 0}
					}
					has = has || !math.IsNaN(c.Median)
					fmt.Fprintf(&vals, " %s %s %s", datNum(c.Median), datNum(c.Min), datNum(c.Max))
				}
				if has {
					fmt.Fprintf(&b, "%q%s\n", fmt.Sprintf("%s ch%d", p.short[i], ch), vals.String())
					rows++
				}
			}
		}
		if err := os.WriteFile(filepath.Join(dir, p.file), []byte(b.String()), 0o644); err != nil {
			return err
		}
		if rows > 0 {
			drawn = append(drawn, p)
		}
	}
	srpt := s.srptTargets()
	var b strings.Builder
	fmt.Fprintf(&b, "# label, then the relative performance of srptarget (%s): srptarget/LIO for IOPS and MiB/s, LIO/srptarget for latency\n",
		s.targetKeys(srpt))
	ratioRows := 0
	for _, m := range Metrics {
		for _, ch := range s.ChCounts {
			var vals strings.Builder
			has := false
			for _, t := range srpt {
				r := s.relative(m, ch, t.Key)
				has = has || !math.IsNaN(r)
				fmt.Fprintf(&vals, " %s", datNum(r))
			}
			if has {
				fmt.Fprintf(&b, "%q%s\n", fmt.Sprintf("%s ch%d", ratioShort[m.Key], ch), vals.String())
				ratioRows++
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ratio.dat"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "chart.gp"))
	if err != nil {
		return err
	}
	s.writeGnuplot(f, title, terminal, drawn, ratioRows > 0)
	return f.Close()
}

func (s Summary) targetKeys(ts []Target) string {
	var k []string
	for _, t := range ts {
		k = append(k, t.Key)
	}
	return strings.Join(k, " ")
}

// colours of the targets, in the order of Summary.Targets (repeated beyond ten targets).
var colours = []string{"#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"}

func colour(i int) string { return colours[i%len(colours)] }

// writeGnuplot writes chart.gp: the panels with data, then the ratio panel if ratio.dat has
// rows, on a grid of up to three columns.
func (s Summary) writeGnuplot(w io.Writer, title, terminal string, drawn []panel, ratios bool) {
	n := len(drawn)
	if ratios {
		n++
	}
	cols := min(n, 3)
	rows := (n + 2) / 3
	// noenhanced: "ib_srpt" is a name, not i b with a subscript
	fmt.Fprintf(w, "%s\nset termoption noenhanced\nset output 'chart.png'\n", terminal)
	if n == 0 {
		// nothing measured: an empty picture rather than none
		fmt.Fprintf(w, "set title %q\nunset border\nunset tics\nset xrange [0:1]\nset yrange [0:1]\n", title)
		fmt.Fprintln(w, "set label 1 'no results' at 0.5,0.5 center")
		fmt.Fprintln(w, "plot NaN notitle")
		return
	}
	fmt.Fprintf(w, "set multiplot layout %d,%d title %q font ',13'\n", rows, cols, title)
	key := "set key top right"
	if len(s.Targets) > 3 {
		// one legend line per target would hide the bars
		key = "set key below horizontal font ',8'"
	}
	fmt.Fprintf(w, `set datafile missing '-'
set style data histograms
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
%s
set yrange [0:*]
set xtics nomirror
set ytics nomirror
`, key)
	for _, p := range drawn {
		fmt.Fprintln(w, "set style histogram errorbars gap 1.5 lw 1")
		fmt.Fprintf(w, "set title %q\nset ylabel %q\n", p.title, p.ylabel)
		if p.rotate {
			fmt.Fprintln(w, "set xtics rotate by -30 font ',9'")
		} else {
			fmt.Fprintln(w, "set xtics norotate font ''")
		}
		var parts []string
		for i, t := range s.Targets {
			c := 2 + 3*i
			using := fmt.Sprintf("%d:%d:%d", c, c+1, c+2)
			src := "''"
			if i == 0 {
				using += ":xtic(1)"
				src = "'" + p.file + "'"
			}
			parts = append(parts, fmt.Sprintf("%s using %s title %q lc rgb %q", src, using, t.Label, colour(i)))
		}
		fmt.Fprintf(w, "plot %s\n", strings.Join(parts, ", \\\n     "))
	}
	if ratios {
		fmt.Fprintln(w, "set style histogram clustered gap 1.5")
		fmt.Fprintln(w, "set title 'srptarget relative to LIO (medians; 1 = equal, higher = srptarget better)'")
		fmt.Fprintln(w, "set ylabel 'srptarget/LIO (IOPS, MiB/s); LIO/srptarget (latency)'")
		fmt.Fprintln(w, "set xtics rotate by -35 font ',9'")
		fmt.Fprintln(w, "set rmargin 5")
		fmt.Fprintln(w, "set yrange [0:1.1<*]") // the line at 1 stays inside the panel
		fmt.Fprintln(w, "set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 1.5 lc rgb 'black' front")
		var parts []string
		for i, t := range s.Targets {
			if t.Key == refTarget {
				continue
			}
			// column i+1: ratio.dat has no LIO column, and LIO is Targets[0]
			using := strconv.Itoa(i + 1)
			src := "''"
			if len(parts) == 0 {
				using += ":xtic(1)"
				src = "'ratio.dat'"
			}
			parts = append(parts, fmt.Sprintf("%s using %s title %q lc rgb %q", src, using, t.Short+" / LIO", colour(i)))
		}
		fmt.Fprintf(w, "plot %s\n", strings.Join(parts, ", \\\n     "))
	}
	fmt.Fprintln(w, "unset multiplot")
}
