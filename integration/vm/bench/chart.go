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
// in dir draws chart.png. terminal is the gnuplot terminal line (pngcairo or png).
func (s Summary) WriteChart(dir, title, terminal string) error {
	for _, p := range panels {
		var b strings.Builder
		fmt.Fprintln(&b, "# label, then median min max for: "+targetKeys())
		for i, m := range p.metrics {
			for _, ch := range s.ChCounts {
				fmt.Fprintf(&b, "%q", fmt.Sprintf("%s ch%d", p.short[i], ch))
				for _, t := range targets {
					c, ok := s.cell(m, ch, t.key)
					if !ok {
						c = Stat{math.NaN(), math.NaN(), math.NaN(), 0}
					}
					fmt.Fprintf(&b, " %s %s %s", datNum(c.Median), datNum(c.Min), datNum(c.Max))
				}
				fmt.Fprintln(&b)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, p.file), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	var b strings.Builder
	fmt.Fprintln(&b, "# label, then the relative performance of srptarget (memory, null): srptarget/LIO for IOPS and MiB/s, LIO/srptarget for latency")
	for _, m := range Metrics {
		for _, ch := range s.ChCounts {
			fmt.Fprintf(&b, "%q %s %s\n", fmt.Sprintf("%s ch%d", ratioShort[m.Key], ch),
				datNum(s.relative(m, ch, "srpt-mem")), datNum(s.relative(m, ch, "srpt-null")))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ratio.dat"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "chart.gp"))
	if err != nil {
		return err
	}
	writeGnuplot(f, title, terminal)
	return f.Close()
}

func targetKeys() string {
	var k []string
	for _, t := range targets {
		k = append(k, t.key)
	}
	return strings.Join(k, " ")
}

// colours of the targets, in the order of targets.
var colours = []string{"#4c72b0", "#dd8452", "#55a868"}

func writeGnuplot(w io.Writer, title, terminal string) {
	// noenhanced: "ib_srpt" is a name, not i b with a subscript
	fmt.Fprintf(w, "%s\nset termoption noenhanced\nset output 'chart.png'\n", terminal)
	fmt.Fprintf(w, "set multiplot layout 2,3 title %q font ',13'\n", title)
	fmt.Fprint(w, `set datafile missing '-'
set style data histograms
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key top right
set yrange [0:*]
set xtics nomirror
set ytics nomirror
`)
	for _, p := range panels {
		fmt.Fprintln(w, "set style histogram errorbars gap 1.5 lw 1")
		fmt.Fprintf(w, "set title %q\nset ylabel %q\n", p.title, p.ylabel)
		if p.rotate {
			fmt.Fprintln(w, "set xtics rotate by -30 font ',9'")
		} else {
			fmt.Fprintln(w, "set xtics norotate font ''")
		}
		var parts []string
		for i, t := range targets {
			c := 2 + 3*i
			using := fmt.Sprintf("%d:%d:%d", c, c+1, c+2)
			if i == 0 {
				using += ":xtic(1)"
			}
			src := "''"
			if i == 0 {
				src = "'" + p.file + "'"
			}
			parts = append(parts, fmt.Sprintf("%s using %s title %q lc rgb %q", src, using, t.label, colours[i]))
		}
		fmt.Fprintf(w, "plot %s\n", strings.Join(parts, ", \\\n     "))
	}
	fmt.Fprintln(w, "set style histogram clustered gap 1.5")
	fmt.Fprintln(w, "set title 'srptarget relative to LIO (medians; 1 = equal, higher = srptarget better)'")
	fmt.Fprintln(w, "set ylabel 'srptarget/LIO (IOPS, MiB/s); LIO/srptarget (latency)'")
	fmt.Fprintln(w, "set xtics rotate by -35 font ',9'")
	fmt.Fprintln(w, "set rmargin 5")
	fmt.Fprintln(w, "set yrange [0:1.1<*]") // the line at 1 stays inside the panel
	fmt.Fprintln(w, "set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 1.5 lc rgb 'black' front")
	fmt.Fprintf(w, "plot 'ratio.dat' using 2:xtic(1) title 'memory / LIO' lc rgb %q, '' using 3 title 'null / LIO' lc rgb %q\n",
		colours[1], colours[2])
	fmt.Fprintln(w, "unset multiplot")
}
