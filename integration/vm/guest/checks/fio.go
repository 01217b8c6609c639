package checks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
)

// FioResult is what a fio run with verify did: its JSON report, and the error lines it wrote.
type FioResult struct {
	Code int // fio's exit status
	// Writes and Reads are the I/Os issued; a write job's verify reads count as reads.
	Writes, Reads int64
	// Errno is the first job's error that is not 0 (EILSEQ for a verify failure).
	Errno int
	// VerifyErrors and IOErrors are the lines fio wrote about wrong data and failed I/O.
	VerifyErrors, IOErrors int
	// IOPS and BW are the writes' (BW in KiB/s).
	IOPS float64
	BW   int64
	// Problem is the first verify or I/O error message fio wrote, or why the report is
	// missing.
	Problem string
	// Output is the file with fio's report.
	Output string
}

// fioReport is fio's --output-format=json, the fields read.
type fioReport struct {
	Jobs []struct {
		Error int `json:"error"`
		Read  struct {
			TotalIOs int64 `json:"total_ios"`
		} `json:"read"`
		Write struct {
			TotalIOs int64   `json:"total_ios"`
			IOPS     float64 `json:"iops"`
			BW       int64   `json:"bw"`
		} `json:"write"`
	} `json:"jobs"`
}

var (
	fioVerifyLine = regexp.MustCompile(`(?i)verify failed|bad magic|bad header|verify: |verify type mismatch|err=84|crc32c: verify`)
	fioIOLine     = regexp.MustCompile(`(?i)io_u error|Input/output error|No such device`)
)

// ParseFio reads fio's JSON report; fio writes its warnings into the report's file before the
// JSON object.
func ParseFio(report []byte) (FioResult, error) {
	var r fioReport
	var res FioResult
	if i := bytes.Index(report, []byte("\n{")); i >= 0 && !bytes.HasPrefix(report, []byte("{")) {
		report = report[i+1:]
	}
	if err := json.Unmarshal(report, &r); err != nil {
		return res, fmt.Errorf("fio's JSON report: %w", err)
	}
	for _, j := range r.Jobs {
		if res.Errno == 0 {
			res.Errno = j.Error
		}
		res.Reads += j.Read.TotalIOs
		res.Writes += j.Write.TotalIOs
		res.IOPS += j.Write.IOPS
		res.BW += j.Write.BW
	}
	return res, nil
}

// errLines counts fio's lines about wrong data and failed I/O, and keeps the first.
func (r *FioResult) errLines(text string) {
	for _, line := range strings.Split(text, "\n") {
		v, io := fioVerifyLine.MatchString(line), fioIOLine.MatchString(line)
		if v {
			r.VerifyErrors++
		} else if io {
			r.IOErrors++
		}
		if (v || io) && r.Problem == "" {
			r.Problem = strings.TrimSpace(line)
		}
	}
	// a job that stopped on an error it wrote no line for
	switch {
	case r.Errno == int(syscall.EILSEQ) && r.VerifyErrors == 0:
		r.VerifyErrors = 1
	case r.Errno != 0 && r.Errno != int(syscall.EILSEQ) && r.IOErrors == 0:
		r.IOErrors = 1
	}
}

// Clean says fio exited 0 with no error of any kind.
func (r FioResult) Clean() bool {
	return r.Code == 0 && r.Errno == 0 && r.VerifyErrors == 0 && r.IOErrors == 0 && r.Problem == ""
}

// Verified says whether every write was read back and verified: clean, writes done and as many
// verify reads.
func (r FioResult) Verified() bool { return r.Clean() && r.Writes > 0 && r.Reads == r.Writes }

func (r FioResult) String() string {
	if r.Verified() {
		return fmt.Sprintf("%d writes, %d read back and crc32c-verified; IOPS=%.0f, BW=%dKiB/s", r.Writes, r.Reads, r.IOPS, r.BW)
	}
	return r.Summary() + problem(r.Problem)
}

// Summary is the counts of a run, whatever its outcome.
func (r FioResult) Summary() string {
	return fmt.Sprintf("%d writes, %d verify reads, %d verify errors, %d I/O errors, fio exit %d",
		r.Writes, r.Reads, r.VerifyErrors, r.IOErrors, r.Code)
}

func problem(p string) string {
	if p == "" {
		return ""
	}
	return ": " + p
}

var fioRuns atomic.Int32

// FioCmd is fio with crc32c verify that stops at the first verify error (verify_fatal,
// libaio) and the job's arguments, its JSON report to a file of its own; FioDone reads what it
// did. Direct I/O is the job's to ask (--direct=1).
func FioCmd(args ...string) (*exec.Cmd, string) {
	report := fmt.Sprintf("/tmp/fio-%d.json", fioRuns.Add(1))
	args = append([]string{"--ioengine=libaio", "--verify=crc32c", "--verify_fatal=1",
		"--output-format=json", "--output=" + report}, args...)
	return exec.Command("fio", args...), report
}

// FioDone is the outcome of a FioCmd that ran: its exit status, report and output.
func FioDone(report string, code int, output string) FioResult {
	b, err := os.ReadFile(report)
	var r FioResult
	if err == nil {
		r, err = ParseFio(b)
	}
	r.Code, r.Output = code, report
	if err != nil {
		r.Problem = err.Error()
	}
	r.errLines(output)
	if report, err := os.ReadFile(report); err == nil {
		r.errLines(string(report[:bytes.IndexByte(append(report, '{'), '{')]))
	}
	return r
}

// Fio runs fio (FioCmd), shown on the console.
func (l *Lab) Fio(args ...string) FioResult {
	cmd, report := FioCmd(args...)
	l.Printf("SRPTVM$ %s", strings.Join(cmd.Args, " "))
	out, _ := cmd.CombinedOutput()
	if len(out) > 0 {
		l.Printf("%s", strings.TrimRight(string(out), "\n"))
	}
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	return FioDone(report, code, string(out))
}
