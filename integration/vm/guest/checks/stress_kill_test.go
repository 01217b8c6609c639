//go:build vmguest

package checks

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bgFio is a fio run in the background.
type bgFio struct {
	done   chan FioResult
	report string
}

// startFio starts fio (FioCmd) in the background.
func (l *Lab) startFio(args ...string) *bgFio {
	cmd, report := FioCmd(args...)
	l.Printf("SRPTVM$ %s &", strings.Join(cmd.Args, " "))
	b := &bgFio{done: make(chan FioResult, 1), report: report}
	go func() {
		out, _ := cmd.CombinedOutput()
		code := -1
		if cmd.ProcessState != nil {
			code = cmd.ProcessState.ExitCode()
		}
		b.done <- FioDone(report, code, string(out))
	}()
	return b
}

// wait is the run's outcome, ok false when it has not ended within d.
func (b *bgFio) wait(d time.Duration) (FioResult, bool) {
	select {
	case r := <-b.done:
		return r, true
	case <-time.After(d):
		return FioResult{}, false
	}
}

// kill, instance 3 (not with quick=1): file LUN; data written and then synchronized
// (SYNCHRONIZE CACHE from fsync), data written with O_SYNC (FUA, or a cache flush per write if
// FUA is not offered), then fio with O_SYNC writes running while the daemon is killed with
// SIGKILL; ib_srp waits (fast_io_fail_tmo raised) and reconnects to instance 4; fio must
// finish and verify, and the data acknowledged before the kill reads back.
func (s *stress) kill(t *testing.T) {
	l := s.lab
	if err := s.start(s.config); err != nil {
		l.Check(t, "kill: instance 3 listening", func(c *C) { c.Fatal(err) })
	}
	h, ok := s.loginWait(t, "kill: login", "ch_count=2", "0 1")
	if !ok {
		return
	}
	e := HostDev(h, 1)
	rp := RportOf(h)
	_ = l.Write(rp+"/reconnect_delay", "2")
	_ = l.Write(rp+"/fast_io_fail_tmo", "90")
	dev := "/sys/block/" + filepath.Base(e)
	fua := readTrim(dev + "/queue/fua")
	device := fmt.Sprintf("device: %s, cache_type '%s', queue/fua %s", Flags(l.Run("sg_modes", "-p", "0x08", e).Text, "DpoFua"),
		strings.Join(Quiet("sh", "-c", "cat "+dev+"/device/scsi_disk/*/cache_type").Lines(), ""), fua)
	f0 := flushes(dev)
	l.Check(t, "kill: region A written and synchronized", func(c *C) {
		r := l.Fio("--name=regionA", "--filename="+e, "--direct=1", "--rw=write", "--bs=64k", "--size=16M", "--offset=0",
			"--do_verify=0", "--end_fsync=1")
		if r.Code != 0 || r.Writes == 0 {
			c.Fatal(r.Summary())
		}
		c.Pass("%s; then fsync: %d flush requests (SYNCHRONIZE CACHE); %s", r.Summary(), flushes(dev)-f0, device)
	})
	f1 := flushes(dev)
	l.Check(t, "kill: region B written with O_SYNC", func(c *C) {
		r := l.Fio("--name=regionB", "--filename="+e, "--direct=1", "--sync=1", "--rw=write", "--bs=64k", "--size=16M",
			"--offset=32M", "--do_verify=0")
		how := "no FUA: a flush per write"
		if fua == "1" {
			how = "FUA writes"
		}
		if r.Code != 0 || r.Writes == 0 {
			c.Fatal(r.Summary())
		}
		c.Pass("%s; %d flush requests (%s)", r.Summary(), flushes(dev)-f1, how)
	})
	s.killDuring(t, h, e)
	e = HostDev(h, 1)
	s.fioCheck(t, "kill: region A reads back", "", "--name=regionA", "--filename="+e, "--direct=1", "--rw=write", "--bs=64k",
		"--size=16M", "--offset=0", "--verify_only")
	s.fioCheck(t, "kill: region B reads back", "", "--name=regionB", "--filename="+e, "--direct=1", "--rw=write", "--bs=64k",
		"--size=16M", "--offset=32M", "--verify_only")
	s.checkDaemon(t, "kill: instance after restart")
}

// flushes is the flush requests a disk completed (field 16 of /sys/block/DEV/stat).
func flushes(dev string) int64 {
	f := strings.Fields(readTrim(dev + "/stat"))
	var n int64
	if len(f) >= 16 {
		fmt.Sscan(f[15], &n)
	}
	return n
}

// killDuring: region C, O_SYNC random writes across SIGKILL and a new instance, verified.
func (s *stress) killDuring(t *testing.T, h, e string) {
	l := s.lab
	rp := RportOf(h)
	d := filepath.Base(e)
	regionC := l.startFio("--name=regionC", "--filename="+e, "--direct=1", "--sync=1", "--rw=randwrite", "--bs=64k",
		"--iodepth=8", "--size=32M", "--offset=64M", "--verify_backlog=64")
	w0, _ := DiskWrites(d)
	WaitFor(30*time.Second, func() bool { w, _ := DiskWrites(d); return w > w0+40 })
	kmark := KMark()
	wk, _ := DiskWrites(d)
	killed := s.d
	l.Printf("SRPTVM$ kill -KILL %d", killed.PID)
	_ = killed.Signal(syscall.SIGKILL)
	killed.WaitExit(10 * time.Second)
	l.Printf("SRPTVM: instance %d killed after %d region C writes; initiator rport: %s", killed.N, wk-w0, readTrim(rp+"/state"))
	time.Sleep(3 * time.Second)
	l.Printf("SRPTVM: 3 s later: rport %s", readTrim(rp+"/state"))
	l.Check(t, "kill: SIGKILL", func(c *C) {
		crashes := Crashes(readLines(killed.LogPath))
		if killed.KilledBy() != syscall.SIGKILL || len(crashes) > 0 {
			c.Fatalf("ended by signal %v, exit status %d; %s", killed.KilledBy(), killed.code, strings.Join(crashes, "; "))
		}
		c.Pass("instance %d killed (SIGKILL) with region C writes in flight; no panic in its log", killed.N)
	})
	t0 := Uptime()
	if err := s.start(s.config); err != nil {
		l.Check(t, "kill: restart", func(c *C) { c.Fatal(err) })
	} else {
		l.Check(t, "kill: initiator reconnected", func(c *C) {
			if !WaitFor(90*time.Second, func() bool { return readTrim(rp+"/state") == "running" }) {
				c.Fatalf("rport '%s' 90 s after the restart", readTrim(rp+"/state"))
			}
			since := KSince(kmark)
			c.Pass("rport running %s s after the restart; %d failed attempt(s); %s", Since(t0), len(Grep(since, reconnectFail)),
				firstMatch(since, reconnectOK))
		})
	}
	since := KSince(kmark)
	l.Printf("%s", strings.Join(since[:min(30, len(since))], "\n"))
	l.Check(t, "kill: O_SYNC writes across the kill", func(c *C) {
		r, ok := regionC.wait(300 * time.Second)
		switch {
		case !ok:
			c.Fatalf("fio still running 300 s after the restart")
		case !r.Clean() || r.Writes == 0 || r.Reads == 0:
			c.Fatalf("%s%s", r.Summary(), problem(r.Problem))
		}
		c.Pass("%s (%d writes done before the kill)", r.Summary(), wk-w0)
	})
}
