package checks

// What the stress scenarios share: sessions by SCSI host, fio in a loop, the block layer's
// requests traced, and the daemon process's resources and goroutines.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sessions by SCSI host: each ib_srp login is one SCSI host (hostN), its disks the host's.

// SCSIHosts are the SCSI hosts (hostN), sorted.
func SCSIHosts() []string {
	m, _ := filepath.Glob("/sys/class/scsi_host/host*")
	var hs []string
	for _, p := range m {
		hs = append(hs, filepath.Base(p))
	}
	slices.Sort(hs)
	return hs
}

// LoginHost is Login that returns the SCSI host the login made (add_target returns after
// ib_srp's SCSI scan), without the retry on EEXIST: a refused login's error is the answer.
func (l *Lab) LoginHost(rxe *RXE, opts string) (string, error) {
	before := SCSIHosts()
	if err := l.loginOnce(rxe, opts); err != nil {
		return "", err
	}
	for _, h := range SCSIHosts() {
		if !slices.Contains(before, h) {
			return h, nil
		}
	}
	return "", errors.New("add_target succeeded but no new SCSI host")
}

var hostDisk = regexp.MustCompile(`:([0-9]+)/block/([^/]+)$`)

// HostDisks are a SCSI host's disks by LUN.
func HostDisks(host string) map[int]string {
	m, _ := filepath.Glob("/sys/class/scsi_host/" + host + "/device/target*/*:*:*:*/block/*")
	disks := map[int]string{}
	for _, p := range m {
		if s := hostDisk.FindStringSubmatch(p); s != nil {
			n, _ := strconv.Atoi(s[1])
			disks[n] = s[2]
		}
	}
	return disks
}

// HostLUNs is a host's LUNs with a disk, "0 1".
func HostLUNs(host string) string {
	var luns []int
	for l := range HostDisks(host) {
		luns = append(luns, l)
	}
	sort.Ints(luns)
	return strings.Trim(fmt.Sprint(luns), "[]")
}

// HostDev is /dev/sdX of a host's LUN, "" without one.
func HostDev(host string, lun int) string {
	if d, ok := HostDisks(host)[lun]; ok {
		return "/dev/" + d
	}
	return ""
}

// RportOf is the SRP remote port of a host's session.
func RportOf(host string) string {
	return "/sys/class/srp_remote_ports/port-" + strings.TrimPrefix(host, "host") + ":1"
}

// LogoutHost deletes a session's remote port and waits for its SCSI host to go.
func (l *Lab) LogoutHost(host string) error {
	rp := RportOf(host)
	disks := HostDisks(host)
	if err := l.Write(rp+"/delete", "1"); err != nil {
		return err
	}
	var names []string
	for _, d := range disks {
		names = append(names, d)
	}
	if err := waitDisksGone(names, 60*time.Second); err != nil {
		return err
	}
	if !WaitFor(60*time.Second, func() bool { _, err := os.Stat("/sys/class/scsi_host/" + host); return err != nil }) {
		return fmt.Errorf("%s still present 60 s after the logout", host)
	}
	l.Printf("logged out %s (disks %v)", host, disks)
	return nil
}

// LogoutAll logs out every SRP session left (ib_srp refuses a second login with the same
// identifiers: EEXIST).
func (l *Lab) LogoutAll() {
	for _, rp := range RemotePorts() {
		n := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(rp), "port-"), ":1")
		if err := l.LogoutHost("host" + n); err != nil {
			l.Printf("SRPTVM: %v", err)
		}
	}
}

// FioLoop is fio runs back to back in the background until stopped (at least one run), or
// until one fails.
type FioLoop struct {
	mu            sync.Mutex
	stop          bool
	done          chan struct{}
	Runs          int
	Writes, Reads int64
	Fail          string // what the failing run did, "" while none failed
}

// StartFioLoop starts the runs of fio ARGS (FioCmd), each shown on the console by its
// summary.
func (l *Lab) StartFioLoop(name string, args ...string) *FioLoop {
	f := &FioLoop{done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for {
			cmd, report := FioCmd(args...)
			out, _ := cmd.CombinedOutput()
			code := -1
			if cmd.ProcessState != nil {
				code = cmd.ProcessState.ExitCode()
			}
			r := FioDone(report, code, string(out))
			f.mu.Lock()
			f.Runs++
			f.Writes += r.Writes
			f.Reads += r.Reads
			l.Printf("SRPTVM: fio loop %s run %d: %s", name, f.Runs, r.Summary())
			if !r.Clean() || r.Writes == 0 || r.Reads == 0 {
				f.Fail = fmt.Sprintf("run %d: %s%s", f.Runs, r.Summary(), problem(r.Problem))
				l.Printf("%s", strings.TrimRight(string(out), "\n"))
			}
			stop := f.stop || f.Fail != ""
			f.mu.Unlock()
			if stop {
				return
			}
		}
	}()
	return f
}

// Stop asks the loop to end after its run and waits up to timeout for it; false when it has
// not ended.
func (f *FioLoop) Stop(timeout time.Duration) bool {
	f.mu.Lock()
	f.stop = true
	f.mu.Unlock()
	select {
	case <-f.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Verified says what the runs did when none failed, or why not.
func (f *FioLoop) Verified() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.Fail != "":
		return f.Fail, false
	case f.Runs == 0:
		return "no fio run", false
	}
	return fmt.Sprintf("%d fio runs, %d writes, %d verify reads, 0 errors", f.Runs, f.Writes, f.Reads), true
}

// Resources are what a process holds that a leak would grow: OS threads, open files and
// resident memory (/proc). The daemon has no debug endpoint; /proc and a SIGQUIT goroutine
// dump are what there is.
type Resources struct {
	Threads, FDs int
	RSSKiB       int64
}

// ResourcesOf reads a process's resources.
func ResourcesOf(pid int) Resources {
	var r Resources
	for _, line := range readLines(fmt.Sprintf("/proc/%d/status", pid)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			r.Threads, _ = strconv.Atoi(strings.TrimSpace(v))
		} else if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			r.RSSKiB, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	r.FDs = len(fds)
	return r
}

func (r Resources) String() string {
	return fmt.Sprintf("%d threads, %d fds, %.1f MiB", r.Threads, r.FDs, float64(r.RSSKiB)/1024)
}

var anonFD = regexp.MustCompile(`^(socket|pipe):\[[0-9]+\]$`)

// FDKinds is a process's open files by kind ("socket=5 pipe=2 /dev/infiniband/uverbs0=1").
func FDKinds(pid int) string {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	n := map[string]int{}
	for _, f := range fds {
		t, err := os.Readlink(f)
		if err != nil {
			continue
		}
		n[anonFD.ReplaceAllString(t, "$1")]++
	}
	var out []string
	for k, v := range n {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// Bounds are how much a process may hold after a scenario more than before it.
type Bounds struct {
	Threads int   // over the larger of before and the peak sampled while it ran
	RSSKiB  int64 // over before
}

// Within says whether after stays within b of before (peak: the threads sampled while the
// scenario ran, 0 for none): open files exactly back to their number.
func (b Bounds) Within(before, after Resources, peak int) (bool, string) {
	base := max(before.Threads, peak)
	detail := fmt.Sprintf("threads %d->%d (bound %d+%d), fds %d->%d (bound +0), RSS %.1f->%.1f MiB (bound +%.1f MiB)",
		before.Threads, after.Threads, base, b.Threads, before.FDs, after.FDs,
		float64(before.RSSKiB)/1024, float64(after.RSSKiB)/1024, float64(b.RSSKiB)/1024)
	return after.FDs <= before.FDs && after.Threads <= base+b.Threads && after.RSSKiB <= before.RSSKiB+b.RSSKiB, detail
}

// Sampler samples a process's threads and RSS twice a second, for the peaks of a scenario:
// the Go runtime keeps every thread it made for blocking (cgo) calls and never ends it, so the
// count after a scenario is its high-water mark.
type Sampler struct {
	mu      sync.Mutex
	samples []sample
	done    chan struct{}
}

type sample struct {
	at      time.Duration
	threads int
	rssKiB  int64
}

// StartSampler samples pid until Stop or until the process is gone.
func StartSampler(pid int) *Sampler {
	s := &Sampler{done: make(chan struct{})}
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			r := ResourcesOf(pid)
			if r.Threads == 0 {
				return
			}
			s.mu.Lock()
			s.samples = append(s.samples, sample{Uptime(), r.Threads, r.RSSKiB})
			s.mu.Unlock()
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends the sampling.
func (s *Sampler) Stop() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
}

// Peak is the most threads and RSS sampled since the uptime t0.
func (s *Sampler) Peak(t0 time.Duration) (threads int, rssKiB int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.samples {
		if x.at >= t0 {
			threads, rssKiB = max(threads, x.threads), max(rssKiB, x.rssKiB)
		}
	}
	return threads, rssKiB
}

// Summary says what was sampled.
func (s *Sampler) Summary() string {
	s.mu.Lock()
	n := len(s.samples)
	s.mu.Unlock()
	t, r := s.Peak(0)
	return fmt.Sprintf("max %d threads, max RSS %.1f MiB, %d samples", t, float64(r)/1024, n)
}

var (
	goroutineHead = regexp.MustCompile(`^goroutine ([0-9]+) .*\[.*\]:`)
	createdBy     = regexp.MustCompile(`^created by (\S+)`)
)

// GoroutineCreators counts the goroutines of a Go traceback (SIGQUIT's, GOTRACEBACK=all) by
// the function that created them, which says what kind each is. The runtime's own goroutines
// (GC workers, the scavenger...), whose number depends on GC timing, are not counted:
// only those created outside package runtime, and main.
func GoroutineCreators(dump []string) map[string]int {
	n := map[string]int{}
	in, creator := false, ""
	out := func() {
		if in && !strings.HasPrefix(creator, "runtime.") {
			if creator == "" {
				creator = "(main)"
			}
			n[creator]++
		}
	}
	for _, line := range dump {
		if m := goroutineHead.FindStringSubmatch(line); m != nil {
			out()
			in, creator = m[1] != "0", ""
		} else if m := createdBy.FindStringSubmatch(line); m != nil {
			creator = m[1]
		}
	}
	out()
	return n
}

// Sum is the number of goroutines counted.
func Sum(n map[string]int) int {
	s := 0
	for _, v := range n {
		s += v
	}
	return s
}

// CreatorsDiff says where two counts differ ("srp.(*Target).serve 2->3, ...").
func CreatorsDiff(ref, now map[string]int) string {
	keys := map[string]bool{}
	for k := range ref {
		keys[k] = true
	}
	for k := range now {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		if ref[k] != now[k] {
			out = append(out, fmt.Sprintf("%s %d->%d", k, ref[k], now[k]))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

var crashLine = regexp.MustCompile(`^(panic: |fatal error: |runtime: |SIGSEGV|SIGBUS|unexpected fault)|\t(DPANIC|PANIC|FATAL)\t`)

// Crashes are the Go runtime's panics and fatal errors in a daemon log, and the daemon's own
// lines that say the process is going down (at most 5). A SIGQUIT dump the checks asked for
// starts with "SIGQUIT: quit" and is not among them.
func Crashes(lines []string) []string {
	var out []string
	for i, l := range lines {
		if crashLine.MatchString(l) && len(out) < 5 {
			out = append(out, fmt.Sprintf("%d:%s", i+1, l))
		}
	}
	return out
}

// voluntarySwitches is the sum of the voluntary context switches of a process's threads.
func voluntarySwitches(pid int) int64 {
	var sum int64
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, f := range tasks {
		for _, line := range readLines(f) {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				sum += n
			}
		}
	}
	return sum
}
