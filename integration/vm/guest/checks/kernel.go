package checks

import (
	"fmt"
	"regexp"
	"strings"
)

// Dmesg is the kernel log.
func Dmesg() string { return Quiet("dmesg").Text }

// KMark is the number of lines in the kernel log now, for KSince.
func KMark() int { return len(Quiet("dmesg").Lines()) }

// KSince is the kernel log's lines after mark, without rdma_rxe's "speed is unknown" noise
// (logged at every device query).
func KSince(mark int) []string {
	lines := Quiet("dmesg").Lines()
	var out []string
	for _, l := range lines[min(mark, len(lines)):] {
		if !strings.Contains(l, "speed is unknown") {
			out = append(out, l)
		}
	}
	return out
}

// Grep is the lines that match re.
func Grep(lines []string, re *regexp.Regexp) []string {
	var out []string
	for _, l := range lines {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

var (
	// transportError: ib_srp's transport error, reconnect and SCSI error handling lines, and
	// rxe's errors. A session that worked has none; ib_srp hides a reconnect from the SCSI
	// layer, so a data check alone would not notice one.
	transportError = regexp.MustCompile(`ib_srp: (failed |reconnect|.*SRP abort|.*SRP reset)|rdma_rxe: .*(not free|failed|error)|rejected|REJ received`)
	// frwrRace is rdma_rxe 6.1's race in the initiator's fast memory registration: its QP fails
	// a REG_MR and ib_srp reconnects (README.md, "Soft-RoCE FRWR race").
	frwrRace      = regexp.MustCompile(`rxe_reg_fast_mr.*not free`)
	kernelProblem = regexp.MustCompile(`WARNING:|BUG:|Oops|Call Trace|general protection|hung_task|blocked for more than|UBSAN|KASAN|list_del corruption`)
	kernelStamp   = regexp.MustCompile(`^\[[^]]*\] `)
	powerOnUA     = regexp.MustCompile(`Power-on or device reset occurred`)
	reconnectFail = regexp.MustCompile(`reconnect attempt.*failed|reconnect.*failed`)
	// kernelNoise: what of a scenario's kernel log is worth showing beyond its start.
	kernelNoise    = regexp.MustCompile(`(?i)WARNING|BUG|error|fail|timed? ?out|abort|reset|reconnect|reject|offline`)
	kernelErrorish = regexp.MustCompile(`(?i)Sense Key|failed|WARNING|BUG|error|reject|abort|reset|timed? ?out|Call Trace`)
)

// TransportErrors are the transport error lines of the kernel log after mark.
func TransportErrors(mark int) []string { return Grep(KSince(mark), transportError) }

// FRWRRace says whether the lines include the soft-RoCE FRWR race.
func FRWRRace(lines []string) bool { return len(Grep(lines, frwrRace)) > 0 }

// ErrorsSummary says in one line what TransportErrors found.
func ErrorsSummary(lines []string) string {
	first := ""
	if len(lines) > 0 {
		first = kernelStamp.ReplaceAllString(lines[0], "")
	}
	if FRWRRace(lines) {
		return fmt.Sprintf("%d error line(s), starting with the soft-RoCE FRWR race (see README): %s", len(lines), first)
	}
	return fmt.Sprintf("%d error line(s): %s", len(lines), first)
}

// KernelProblems are the WARNING, BUG, Oops, hung task... lines of the whole kernel log.
func KernelProblems() []string { return Grep(Quiet("dmesg").Lines(), kernelProblem) }

// KernelErrors are the error-looking kernel lines after mark, except "Power-on or device reset
// occurred": Linux logs it for the unit attention (ASC 29h) a logical unit reports to each new
// I_T nexus, as SPC-4 requires.
func KernelErrors(mark int) []string {
	var out []string
	for _, l := range Grep(KSince(mark), kernelErrorish) {
		if !powerOnUA.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// Unstamped is a kernel line without its time stamp.
func Unstamped(line string) string { return kernelStamp.ReplaceAllString(line, "") }

// CheckKernelLog is the "kernel log" check at the end of a run: no warnings, oopses or hung
// tasks in the whole kernel log.
func (c *C) CheckKernelLog() {
	if p := KernelProblems(); len(p) > 0 {
		c.lab.Printf("%s", strings.Join(p, "\n"))
		c.Fatalf("%s", p[0])
	}
	c.Pass("no warnings, oopses or hung tasks")
}

// firstMatch is what re matches in the first line it matches, "" in none.
func firstMatch(lines []string, re *regexp.Regexp) string {
	for _, l := range lines {
		if m := re.FindString(l); m != "" {
			return m
		}
	}
	return ""
}
