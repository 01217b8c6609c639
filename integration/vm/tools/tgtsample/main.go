// Command tgtsample is the two-host bench's sampler on the target VM
// (integration/vm/guest/bench-2host-target.sh): every interval it reads the counters the
// target's CPU per I/O is computed from and prints them in batches, one line per sample:
//
//	TGTCPU up=UPTIME cpu=a,b,... ctxt=N dproc=utime,stime dio=syscr,syscw dcs=vol,invol
//
// cpu is the "cpu" line of /proc/stat and ctxt its context switches (proc(5)); dproc and dio
// are the daemon's (fields 14 and 15 of /proc/PID/stat, syscr and syscw of /proc/PID/io), dcs
// its voluntary and involuntary context switches summed over its threads
// (/proc/PID/task/*/status); with -vpid the same three of the variant daemon follow as vdproc,
// vdio and vdcs. Each batch starts with "SRPTVM-SYNC uptime U", printed at once:
// the host maps the guest's uptime to its own clock with it (bench-2host.sh). With -out FILE
// the samples go to FILE instead, one write per sample, and only the SYNC lines to standard
// output (the console): under TCG the serial console costs the guest kernel thousands of
// instructions per character, which would land in the jobs' instruction counts.
//
// It replaces a shell loop because the target's instructions are counted too (the qemu
// plugin integration/vm/insn/insn.c): the shell loop executed some 5 million user-space
// instructions a sample, as many per second as the daemon at a few thousand I/Os, and fewer
// when the CPU was busy, so that the idle target's rate could not be subtracted. This
// program keeps each file open and reads it again with one pread at offset 0 (a /proc file
// is generated anew on every read from its start), starts no process, and runs on one OS
// thread.
//
//	tgtsample -pid PID [-vpid PID] [-interval 500ms] [-batch 20] [-out FILE]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"
)

func main() {
	pid := flag.Int("pid", 0, "the daemon's process ID (0: no daemon counters)")
	vpid := flag.Int("vpid", 0, "the variant daemon's process ID (0: none), its counters as vdproc, vdio and vdcs")
	interval := flag.Duration("interval", 500*time.Millisecond, "time between samples")
	batch := flag.Int("batch", 20, "samples per SYNC line")
	outPath := flag.String("out", "", "write the samples to this file (default: standard output, in batches)")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(400)
	var file *os.File
	if *outPath != "" {
		f, err := os.OpenFile(*outPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "tgtsample:", err)
			os.Exit(1)
		}
		file = f
	}
	s := &sampler{proc: "/proc", pid: *pid, vpid: *vpid, buf: make([]byte, 64<<10)}
	var out bytes.Buffer
	n := 0
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for range tick.C {
		s.sample(&out)
		if file != nil {
			if _, err := file.Write(out.Bytes()); err != nil {
				fmt.Fprintln(os.Stderr, "tgtsample:", err)
				os.Exit(1)
			}
			out.Reset()
		}
		if n++; n < *batch {
			continue
		}
		up, _ := s.uptime()
		fmt.Fprintf(os.Stdout, "SRPTVM-SYNC uptime %s\n", up)
		if _, err := os.Stdout.Write(out.Bytes()); err != nil {
			os.Exit(1)
		}
		out.Reset()
		n = 0
	}
}

// sampler reads the counters under proc (/proc, or a test's directory).
type sampler struct {
	proc  string
	pid   int
	vpid  int // the variant daemon (bench-2host-target.sh's variant=), 0: none
	buf   []byte
	files map[string]*os.File // open, by path
	seen  map[string]bool     // the paths read in this sample
}

// read returns the contents of path, in s.buf (valid until the next read), or nil. The file
// stays open for the next sample; endSample closes those no sample read.
func (s *sampler) read(path string) []byte {
	if s.files == nil {
		s.files, s.seen = map[string]*os.File{}, map[string]bool{}
	}
	f := s.files[path]
	if f == nil {
		var err error
		if f, err = os.Open(path); err != nil {
			return nil
		}
		s.files[path] = f
	}
	s.seen[path] = true
	n, err := f.ReadAt(s.buf, 0)
	if err != nil && err != io.EOF {
		f.Close()
		delete(s.files, path)
		return nil
	}
	return s.buf[:n]
}

// endSample closes the files this sample did not read (threads gone, a daemon gone).
func (s *sampler) endSample() {
	for path, f := range s.files {
		if !s.seen[path] {
			f.Close()
			delete(s.files, path)
		}
	}
	clear(s.seen)
}

// uptime returns the first field of /proc/uptime.
func (s *sampler) uptime() (string, bool) {
	b := s.read(s.proc + "/uptime")
	if i := bytes.IndexByte(b, ' '); i > 0 {
		return string(b[:i]), true
	}
	return "", false
}

// sample appends one TGTCPU line to out; a counter it cannot read is left out of the line (as
// a daemon gone is), and a sample without up or cpu is skipped.
func (s *sampler) sample(out *bytes.Buffer) {
	defer s.endSample()
	up, ok := s.uptime()
	if !ok {
		return
	}
	cpu, ctxt := statLine(s.read(s.proc + "/stat"))
	if cpu == "" {
		return
	}
	fmt.Fprintf(out, "TGTCPU up=%s cpu=%s ctxt=%s", up, cpu, ctxt)
	s.daemon(out, "d", s.pid)
	s.daemon(out, "vd", s.vpid)
	out.WriteByte('\n')
}

// daemon appends the counters of process pid (none when pid is 0) with the key prefix pre:
// its CPU times (dproc), read and write system calls (dio) and context switches (dcs).
func (s *sampler) daemon(out *bytes.Buffer, pre string, pid int) {
	if pid <= 0 {
		return
	}
	base := s.proc + "/" + strconv.Itoa(pid)
	if ut, st, ok := procTimes(s.read(base + "/stat")); ok {
		fmt.Fprintf(out, " %sproc=%s,%s", pre, ut, st)
	} else {
		fmt.Fprintf(out, " %sproc=0,0", pre)
	}
	iob := s.read(base + "/io")
	r, w := field(iob, "syscr: "), field(iob, "syscw: ")
	if r == "" || w == "" {
		r, w = "0", "0"
	}
	fmt.Fprintf(out, " %sio=%s,%s", pre, r, w)
	if vol, invol, ok := s.switches(base + "/task"); ok {
		fmt.Fprintf(out, " %scs=%d,%d", pre, vol, invol)
	}
}

// switches sums the voluntary and involuntary context switches of every thread under dir.
func (s *sampler) switches(dir string) (vol, invol uint64, ok bool) {
	d, err := os.Open(dir)
	if err != nil {
		return 0, 0, false
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, 0, false
	}
	for _, n := range names {
		b := s.read(dir + "/" + n + "/status")
		v, _ := strconv.ParseUint(field(b, "voluntary_ctxt_switches:\t"), 10, 64)
		i, _ := strconv.ParseUint(field(b, "nonvoluntary_ctxt_switches:\t"), 10, 64)
		vol, invol = vol+v, invol+i
	}
	return vol, invol, true
}

// statLine returns /proc/stat's "cpu" line's numbers, comma-separated, and its ctxt.
func statLine(b []byte) (cpu, ctxt string) {
	for line := range bytes.Lines(b) {
		switch {
		case bytes.HasPrefix(line, []byte("cpu ")):
			cpu = string(bytes.Join(bytes.Fields(line[4:]), []byte(",")))
		case bytes.HasPrefix(line, []byte("ctxt ")):
			ctxt = string(bytes.TrimSpace(line[5:]))
		}
	}
	return cpu, ctxt
}

// procTimes returns utime and stime, fields 14 and 15 of /proc/PID/stat, counted after the
// command name's closing parenthesis (the name may hold spaces).
func procTimes(b []byte) (utime, stime string, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", "", false
	}
	f := bytes.Fields(b[i+1:]) // field 3 onwards
	if len(f) < 13 {
		return "", "", false
	}
	return string(f[11]), string(f[12]), true
}

// field returns the rest of the line of b that starts with key, "" when none does.
func field(b []byte, key string) string {
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte(key)); ok {
			return string(bytes.TrimSpace(v))
		}
	}
	return ""
}
