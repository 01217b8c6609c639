//go:build vmguest

package checks

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestVerbs runs the tests of package ib/verbs (the rdma-core implementation of the ib
// interfaces) against soft-RoCE (make e2e runs it after TestE2E, in a VM of its own): both ends
// of every connection in one process, over rxe0's IPv4, IPv6 and IPv6 link-local addresses.
// TestDeviceRemoval runs last, twice: it removes the device (rdma link delete) under live
// listeners, a connection and memory registrations and adds it back, first as the only device,
// then with a second device (rxe1 on dummy1). Each test and subtest of the binary is a row of
// the result table, and so is each round-trip latency TestRoundTrips logs.
//
// The test binary (go test -c ./ib/verbs) is built on the host; it links dynamically to
// libibverbs.so.1 and librdmacm.so.1, which the image has (bookworm's, as on the build host).
//
// Arguments (k=v), all optional: verbs_bin=/usr/local/bin/verbs.test; verbs_run=. (its
// -test.run pattern for the main run); race_bin= (a second binary, go test -race -c, run the
// same way); linklocal=1 (0: not the link-local address); removal=1 (0: no TestDeviceRemoval);
// removal_repeat=1 (runs of each of the two); test_timeout=600s; plus SetupRXE's.
func TestVerbs(t *testing.T) {
	l := NewLab(t)
	v := &verbs{lab: l, bin: l.Arg("verbs_bin", "/usr/local/bin/verbs.test")}
	l.Check(t, "rxe", func(c *C) {
		if _, err := os.Stat(v.bin); err != nil {
			c.Abort("no test binary %s (SRPT_VM_FILES=\"verbs.test:%s\")", v.bin, v.bin)
		}
		v.rxe = l.MustRXE(c)
		v.addrs = []string{v.rxe.IP4, v.rxe.IP6}
		c.Pass("%s on %s, GID[%d] %s, GID[%d] %s", v.rxe.Name, v.rxe.Netdev, v.rxe.GID4, v.rxe.IP4, v.rxe.GID6, v.rxe.IP6)
	})
	if v.rxe == nil {
		return
	}
	if l.Arg("linklocal", "1") == "1" {
		l.Check(t, "link-local address", v.linkLocal)
	}
	v.run(t, v.bin, "")
	if race := l.Arg("race_bin", ""); race != "" {
		v.run(t, race, "race: ")
	}
	if l.Arg("removal", "1") == "1" {
		v.removals(t)
	}
	l.Check(t, "kernel log", func(c *C) { c.CheckKernelLog() })
}

type verbs struct {
	lab   *Lab
	bin   string
	rxe   *RXE
	addrs []string // SRPT_VERBS_ADDRS
}

// linkLocal adds the netdev's IPv6 link-local address to the addresses tested. It appears once
// the netdev is up and leaves the tentative state after DAD; RDMA/CM cannot bind a tentative
// address.
func (v *verbs) linkLocal(c *C) {
	var ll string
	var idx int
	ok := WaitFor(25*time.Second, func() bool {
		for _, line := range Quiet("ip", "-6", "-o", "addr", "show", "dev", v.rxe.Netdev, "scope", "link").Lines() {
			f := strings.Fields(line)
			if len(f) > 3 && !strings.Contains(line, "tentative") {
				ll, _, _ = strings.Cut(f[3], "/")
			}
		}
		if ll == "" {
			return false
		}
		gid, err := GIDOf(ll)
		idx = v.rxe.GIDIndex(gid)
		return err == nil && idx >= 0
	})
	v.rxe.showGIDs(v.lab)
	if !ok {
		c.Fatalf("no usable link-local address on %s: %s", v.rxe.Netdev, oneLine(Quiet("ip", "-6", "-o", "addr", "show", "dev", v.rxe.Netdev).Text))
	}
	v.addrs = append(v.addrs, ll+"%"+v.rxe.Netdev)
	c.Pass("%s%%%s, GID[%d]", ll, v.rxe.Netdev, idx)
}

var (
	goResult  = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([^)]*)\)`)
	roundTrip = regexp.MustCompile(`(\S+ [a-z-]+): (10000 round trips of 64 B: .*)`)
)

// GoResult is one test's outcome in go test -v output.
type GoResult struct{ Status, Name, Took string }

// GoResults are the outcomes go test -v reported, in its order.
func GoResults(out string) []GoResult {
	var rs []GoResult
	for _, line := range strings.Split(out, "\n") {
		if m := goResult.FindStringSubmatch(line); m != nil {
			rs = append(rs, GoResult{m[1], m[2], m[3]})
		}
	}
	return rs
}

// record writes a row per test and subtest of go test -v output, and one per round-trip
// latency; skips are failures except for the tests that skip by design when a device is
// present.
func (v *verbs) record(out, prefix string) {
	for _, r := range GoResults(out) {
		switch r.Status {
		case "PASS":
			v.lab.Record(prefix+r.Name, true, r.Took)
		case "FAIL":
			v.lab.Record(prefix+r.Name, false, "see the console log")
		case "SKIP":
			byDesign := r.Name == "TestNoDevice" || r.Name == "TestDeviceRemoval"
			v.lab.Record(prefix+r.Name, byDesign, map[bool]string{true: "skipped by design", false: "skipped"}[byDesign])
		}
	}
	for _, m := range roundTrip.FindAllStringSubmatch(out, -1) {
		v.lab.Record(prefix+"latency "+m[1], true, m[2])
	}
}

// goTest runs a test binary with env, its output to the console as it comes and returned;
// hung is called once if it runs longer than after.
func (v *verbs) goTest(bin string, env []string, after time.Duration, hung func(pid int), args ...string) (string, int) {
	v.lab.Printf("SRPTVM$ %s %s %s", strings.Join(env, " "), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var buf bytes.Buffer
	// one writer for both: exec then calls it from one goroutine at a time
	w := io.MultiWriter(&buf, v.lab.out)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return err.Error(), -1
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(after):
		if hung != nil {
			hung(cmd.Process.Pid)
		}
		select {
		case <-done:
		case <-time.After(300 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	return buf.String(), cmd.ProcessState.ExitCode()
}

// run is the main run of a binary: every test but TestDeviceRemoval against the addresses.
func (v *verbs) run(t *testing.T, bin, prefix string) {
	l := v.lab
	l.Step("%s: -test.run '%s' against %s", bin, l.Arg("verbs_run", "."), strings.Join(v.addrs, " "))
	out, code := v.goTest("timeout", []string{"SRPT_VERBS_ADDRS=" + strings.Join(v.addrs, " ")}, 900*time.Second, nil,
		"900", bin, "-test.v", "-test.count=1", "-test.timeout", l.Arg("test_timeout", "600s"),
		"-test.run", l.Arg("verbs_run", "."), "-test.skip", "^TestDeviceRemoval$")
	v.record(out, prefix)
	l.Check(t, prefix+"go test", func(c *C) {
		if code != 0 || !regexp.MustCompile(`(?m)^PASS$`).MatchString(out) {
			c.Fatalf("exit %d", code)
		}
		c.Pass("exit 0")
	})
}

// removals runs TestDeviceRemoval as the only device, then with a second device present.
func (v *verbs) removals(t *testing.T) {
	l := v.lab
	n := l.ArgInt("removal_repeat", 1)
	nth := func(i int) string {
		if n == 1 {
			return ""
		}
		return fmt.Sprintf(" #%d", i)
	}
	// First as the only RDMA device: librdmacm never learns that the last device went away
	// (see srpt_release_cma in ib/verbs/shim.c), the case of a target with one HCA.
	for i := 1; i <= n; i++ {
		v.removal(t, "only device"+nth(i))
	}
	// Then with a second device present: librdmacm's device list keeps an entry to compare (and
	// rdma-core 44 compares them wrongly at times; see srpt_release_cma).
	l.Step("second soft-RoCE device rxe1 on dummy1")
	ok := l.Check(t, "rxe1", func(c *C) {
		for _, s := range [][]string{{"ip", "link", "add", "dummy1", "type", "dummy"}, {"ip", "link", "set", "dummy1", "address", "02:00:00:00:00:02"},
			{"ip", "link", "set", "dummy1", "up"}, {"rdma", "link", "add", "rxe1", "type", "rxe", "netdev", "dummy1"}} {
			if o := l.Run(s[0], s[1:]...); !o.OK() {
				c.Fatalf("could not add rxe1 (%s: exit %d): the removal test ran only as the last device", strings.Join(s, " "), o.Code)
			}
		}
		c.Pass("rxe1 on dummy1")
	})
	if ok {
		for i := 1; i <= n; i++ {
			v.removal(t, "second device present"+nth(i))
		}
	}
}

var linkDeleteTook = regexp.MustCompile(`rdma link delete returned after \S+`)

// removal is TestDeviceRemoval against rxe0 (it deletes the device under a live connection,
// listeners and registered memory, and adds it back), then the check that the device is back.
func (v *verbs) removal(t *testing.T, label string) {
	l := v.lab
	l.Step("%s: TestDeviceRemoval, %s (rdma link delete %s, then rdma link add)", v.bin, label, v.rxe.Name)
	out, code := v.goTest(v.bin, []string{"SRPT_VERBS_ADDRS=" + v.rxe.IP4, "SRPT_VERBS_REMOVE_DEVICE=" + v.rxe.Name},
		120*time.Second, v.threads, "-test.v", "-test.count=1", "-test.timeout", "150s", "-test.run", "^TestDeviceRemoval$")
	v.record(out, label+": ")
	l.Check(t, label+": go test", func(c *C) {
		if code != 0 || !regexp.MustCompile(`(?m)^PASS$`).MatchString(out) {
			c.Fatalf("exit %d", code)
		}
		c.Pass("exit 0; %s", linkDeleteTook.FindString(out))
	})
	l.Check(t, label+": "+v.rxe.Name+" back", func(c *C) {
		dev := "/sys/class/infiniband/" + v.rxe.Name
		if _, err := os.Stat(dev); err == nil && WaitFor(20*time.Second, func() bool { return strings.Contains(v.rxe.port("state"), "ACTIVE") }) {
			c.Pass("rdma link add by the test, port active")
			return
		}
		link := Quiet("rdma", "link").Text
		if _, err := os.Stat(dev); err != nil {
			l.Run("rdma", "link", "add", v.rxe.Name, "type", "rxe", "netdev", v.rxe.Netdev)
		}
		c.Fatalf("%s", oneLine(link))
	})
}

// threads shows where every thread of a hung test process is, before the test's own timeout
// panics: wchan, the system call and the kernel stack; for futex(2) on a pthread mutex, its
// words (lock, count, owner tid) and the mapping they are in.
func (v *verbs) threads(pid int) {
	l := v.lab
	l.Printf("SRPTVM: TestDeviceRemoval still running after 120 s; its threads:")
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, task := range tasks {
		sc := readTrim(task + "/syscall")
		l.Printf("SRPTVM: -- thread %s: wchan %s, syscall %s", filepath.Base(task), readTrim(task+"/wchan"), sc)
		l.Printf("%s", readTrim(task+"/stack"))
		f := strings.Fields(sc)
		if len(f) < 2 || f[0] != "202" {
			continue
		}
		addr, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err != nil {
			continue
		}
		if mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid)); err == nil {
			var words [4]uint32
			b := make([]byte, 16)
			if _, err := mem.ReadAt(b, int64(addr)); err == nil {
				for i := range words {
					words[i] = binary.LittleEndian.Uint32(b[4*i:])
				}
				l.Printf("SRPTVM:    futex words: %08x %08x %08x %08x", words[0], words[1], words[2], words[3])
			}
			mem.Close()
		}
		for _, m := range readLines(fmt.Sprintf("/proc/%d/maps", pid)) {
			lo, hi, ok := strings.Cut(strings.Fields(m)[0], "-")
			a, _ := strconv.ParseUint(lo, 16, 64)
			b, _ := strconv.ParseUint(hi, 16, 64)
			if ok && a <= addr && addr < b {
				l.Printf("SRPTVM:    in %s", m)
			}
		}
	}
}
