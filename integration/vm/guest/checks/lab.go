package checks

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Lab is the guest as the checks see it: the run's arguments (the k=v words given to
// run-vm.sh, in /lab/args), the result table /init prints, and the console.
type Lab struct {
	args    []string // k=v lines; the first of a key wins, as guest/lib.sh's arg
	results string   // the result table, one "name|pass|detail" line per check
	out     io.Writer
	aborted string // why the run cannot go on; later checks do not run
}

// NewLab reads the run's arguments from /lab/args (SRPTVM_ARGS names another file) and
// appends results to $SRPTVM_RESULTS (default /run/srptvm/results, as /init reads it); t
// fails when it cannot.
func NewLab(t testing.TB) *Lab {
	t.Helper()
	l, err := newLab()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newLab() (*Lab, error) {
	l := &Lab{out: os.Stdout, results: os.Getenv("SRPTVM_RESULTS")}
	if l.results == "" {
		l.results = "/run/srptvm/results"
	}
	if err := os.MkdirAll(filepath.Dir(l.results), 0o755); err != nil {
		return nil, err
	}
	path := os.Getenv("SRPTVM_ARGS")
	if path == "" {
		path = "/lab/args"
	}
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	l.args = strings.Split(string(b), "\n")
	return l, nil
}

// Arg is the value of NAME=... among the run's arguments, or def.
func (l *Lab) Arg(name, def string) string {
	for _, a := range l.args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return def
}

// ArgInt is Arg as a number; a value that is not one is def.
func (l *Lab) ArgInt(name string, def int) int {
	n, err := strconv.Atoi(l.Arg(name, strconv.Itoa(def)))
	if err != nil {
		return def
	}
	return n
}

// Printf writes to the console (the run's log).
func (l *Lab) Printf(format string, args ...any) {
	fmt.Fprintf(l.out, format, args...)
	if !strings.HasSuffix(format, "\n") {
		fmt.Fprintln(l.out)
	}
}

// Step marks a stage of the run; run-vm.sh shows these lines as they come.
func (l *Lab) Step(format string, args ...any) {
	l.Printf("SRPTVM: ---- %s (uptime %.2f)", fmt.Sprintf(format, args...), Uptime().Seconds())
}

// Record appends one row to the result table and says so on the console.
func (l *Lab) Record(name string, pass bool, detail string) {
	status := "fail"
	if pass {
		status = "pass"
	}
	name = strings.ReplaceAll(name, "|", "/")
	detail = oneLine(detail)
	f, err := os.OpenFile(l.results, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintf(f, "%s|%s|%s\n", name, status, detail)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		l.Printf("SRPTVM: cannot write the result table %s: %v", l.results, err)
	}
	if detail != "" {
		detail = " (" + detail + ")"
	}
	l.Printf("SRPTVM: check %s: %s%s", name, status, detail)
}

var (
	spaces = regexp.MustCompile(`\s+`)
	// testifyLabel starts a section of a testify failure message ("\tError:      \t...").
	testifyLabel = regexp.MustCompile(`^\t([A-Z][A-Za-z ]*):\s*\t?(.*)$`)
)

// oneLine makes a detail one line of the table: no '|', no newline, testify's Error Trace and
// Test sections left out, at most 400 characters.
func oneLine(s string) string {
	var keep []string
	skip := false
	for _, line := range strings.Split(s, "\n") {
		if m := testifyLabel.FindStringSubmatch(line); m != nil {
			skip = m[1] == "Error Trace" || m[1] == "Test"
			if m[1] == "Error" || m[1] == "Messages" {
				line = m[2]
			}
		}
		if !skip {
			keep = append(keep, line)
		}
	}
	s = strings.Join(keep, " ")
	s = strings.ReplaceAll(s, "|", "/")
	s = strings.TrimSpace(spaces.ReplaceAllString(s, " "))
	if len(s) > 400 {
		s = s[:397] + "..."
	}
	return s
}

// C is one check: a subtest whose outcome is one row of the result table. It is a
// require.TestingT, so that testify's assertions fail it with their message as the detail.
type C struct {
	*testing.T
	lab     *Lab
	detail  string
	problem string
}

// Check runs f as the subtest name of t and records its row: pass with the detail f gave
// Pass, or fail with its first failure's message. After an Abort no further check runs.
func (l *Lab) Check(t *testing.T, name string, f func(c *C)) bool {
	t.Helper()
	if l.aborted != "" {
		return false
	}
	var c *C
	ok := t.Run(name, func(t *testing.T) {
		c = &C{T: t, lab: l}
		f(c)
	})
	if c == nil { // not selected by -run
		return ok
	}
	switch {
	case ok:
		l.Record(name, true, c.detail)
	case c.problem != "":
		l.Record(name, false, c.problem)
	default:
		l.Record(name, false, "failed (see the console log)")
	}
	return ok
}

// Pass sets the detail of the check's row when it passes.
func (c *C) Pass(format string, args ...any) { c.detail = fmt.Sprintf(format, args...) }

func (c *C) note(msg string) {
	if c.problem == "" {
		c.problem = msg
	}
}

// Errorf fails the check; its first message becomes the row's detail.
func (c *C) Errorf(format string, args ...any) {
	c.T.Helper()
	c.note(fmt.Sprintf(format, args...))
	c.T.Errorf(format, args...)
}

// Error is Errorf with Sprint's formatting.
func (c *C) Error(args ...any) {
	c.T.Helper()
	c.Errorf("%s", fmt.Sprint(args...))
}

// Fatalf fails the check and ends it.
func (c *C) Fatalf(format string, args ...any) {
	c.T.Helper()
	c.Errorf(format, args...)
	c.T.FailNow()
}

// Fatal is Fatalf with Sprint's formatting.
func (c *C) Fatal(args ...any) {
	c.T.Helper()
	c.Fatalf("%s", fmt.Sprint(args...))
}

// Abort fails the check and the run: what the later checks need is missing (no daemon, no
// login). The kernel log's tail goes to the console, as it tells most.
func (c *C) Abort(format string, args ...any) {
	c.T.Helper()
	msg := fmt.Sprintf(format, args...)
	c.lab.aborted = msg
	c.lab.Printf("SRPTVM: FAIL: %s", msg)
	c.lab.Printf("SRPTVM: ---- kernel log (tail)")
	lines := strings.Split(strings.TrimSpace(Dmesg()), "\n")
	c.lab.Printf("%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
	c.Fatalf("%s", msg)
}

// Equal passes with got as the detail when it is want, and fails saying both otherwise (the
// form of most rows: what the initiator saw).
func (c *C) Equal(want, got string) {
	c.T.Helper()
	if want != got {
		c.Fatalf("want '%s', got '%s'", want, got)
	}
	c.Pass("%s", got)
}

// Uptime is the guest's uptime (/proc/uptime), the clock the console's marks use.
func Uptime() time.Duration {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// Since is the time from an Uptime to now, in seconds with one decimal, as the rows say it.
func Since(t0 time.Duration) string {
	return fmt.Sprintf("%.1f", (Uptime() - t0).Seconds())
}

// WaitFor polls cond every 0.2 s until it holds (true) or d has passed (false).
func WaitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	return true
}

// readLines is the lines of a file, nil when it cannot be read.
func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	return lines
}

// readTrim is a (sysfs) file's content without surrounding space; "" when it cannot be read.
func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Group runs f as the subtest name of t, its progress marker step: checks that are steps of
// one sequence, selected together by -run. It does not run after an Abort.
func (l *Lab) Group(t *testing.T, name, step string, f func(t *testing.T)) {
	t.Helper()
	if l.aborted != "" {
		return
	}
	t.Run(name, func(t *testing.T) {
		l.Step("%s", step)
		f(t)
	})
}

// prefixWriter copies what is written to w, whole lines each with the prefix, thinning out
// the lines of the messages thin.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	part   []byte
	thin   []Msg
	seen   map[Msg]int
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.part = append(p.part, b...)
	for {
		i := bytes.IndexByte(p.part, '\n')
		if i < 0 {
			break
		}
		line := string(p.part[:i])
		p.part = p.part[i+1:]
		if skip, note := p.thinned(line); skip {
			continue
		} else if _, err := fmt.Fprintf(p.w, "%s%s%s\n", p.prefix, note, line); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// thinned says whether to leave a line out, or what to say of it.
func (p *prefixWriter) thinned(line string) (bool, string) {
	if len(p.thin) == 0 {
		return false, ""
	}
	l, ok := ParseLogLine(line)
	if !ok {
		return false, ""
	}
	for _, m := range p.thin {
		if l.Msg != string(m) {
			continue
		}
		p.seen[m]++
		switch n := p.seen[m]; {
		case n <= 6:
			return false, ""
		case n%100 != 0:
			return true, ""
		default:
			return false, fmt.Sprintf("(%dth %q) ", n, m)
		}
	}
	return false, ""
}
