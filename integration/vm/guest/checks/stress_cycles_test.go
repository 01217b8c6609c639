//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dm is a one-path dm-multipath device (srpmp) that queues I/O while no path works, made with
// dmsetup without udev (the VM has none: libdevmapper makes the nodes).
type dm struct {
	lab     *Lab
	sectors string
}

// dmSetup loads dm-mod, dm-multipath and dm-round-robin (/lab/dm/*.ko, which stress.sh on the
// host takes from Debian's kernel package, as dmsetup).
func (l *Lab) dmSetup() error {
	os.Setenv("DM_DISABLE_UDEV", "1")
	if o := Quiet("sh", "-c", "command -v dmsetup"); !o.OK() {
		return fmt.Errorf("no dmsetup")
	}
	for _, m := range []string{"dm-mod", "dm-multipath", "dm-round-robin"} {
		if _, err := os.Stat("/sys/module/" + strings.ReplaceAll(m, "-", "_")); err == nil {
			continue
		}
		if o := l.Run("insmod", "/lab/dm/"+m+".ko"); !o.OK() {
			return fmt.Errorf("insmod /lab/dm/%s.ko: %s", m, lastLine(o))
		}
	}
	return nil
}

func (m *dm) table(dev string) string {
	return fmt.Sprintf("0 %s multipath 1 queue_if_no_path 0 1 1 round-robin 0 1 1 %s 1000", m.sectors,
		readTrim("/sys/block/"+filepath.Base(dev)+"/dev"))
}

// block is the dm-N of srpmp.
func (m *dm) block() string {
	ds, _ := filepath.Glob("/sys/block/dm-*")
	for _, d := range ds {
		if readTrim(d+"/dm/name") == "srpmp" {
			return filepath.Base(d)
		}
	}
	return ""
}

// switchTo points srpmp at dev; noflush keeps the I/O queued for want of a path instead of
// failing it.
func (m *dm) switchTo(dev string) bool {
	return m.lab.Run("dmsetup", "--noudevsync", "suspend", "--noflush", "srpmp").OK() &&
		m.lab.Run("dmsetup", "--noudevsync", "reload", "srpmp", "--table", m.table(dev)).OK() &&
		m.lab.Run("dmsetup", "--noudevsync", "resume", "srpmp").OK()
}

// schedNone sets no I/O scheduler, as blktests does on the SRP paths and the multipath device:
// with mq-deadline on dm-0, Linux 6.1 warned "WARNING: ... at block/mq-deadline.c:669
// dd_exit_sched" from `dmsetup remove` after the cycles (its per-priority request statistics
// did not add up after the requeues of queue_if_no_path): the initiator's kernel, not the
// target.
func schedNone(dev string) {
	_ = os.WriteFile("/sys/block/"+filepath.Base(dev)+"/queue/scheduler", []byte("none"), 0o200)
}

// cyclesScenario: logout/login cycles of the initiator while fio writes, as blktests srp/011:
// fio runs on a dm-multipath device (queue_if_no_path, one path) over the SRP disk; each cycle
// deletes the SRP remote port, waits 1-3 s, logs in again and switches the multipath table to
// the new disk.
func (s *stress) cyclesScenario(t *testing.T) {
	l := s.lab
	before := ResourcesOf(s.d.PID)
	if err := l.dmSetup(); err != nil {
		l.Check(t, "cycles: dm-multipath", func(c *C) { c.Fatalf("cannot set up dm-multipath: %v", err) })
	} else if h, ok := s.loginWait(t, "cycles: first login", "ch_count=2", "0 1"); ok {
		dev := HostDev(h, 0)
		schedNone(dev)
		m := &dm{lab: l, sectors: strings.TrimSpace(Quiet("blockdev", "--getsz", dev).Text)}
		if l.Check(t, "cycles: dm-multipath", func(c *C) {
			if !l.Run("dmsetup", "--noudevsync", "create", "srpmp", "--table", m.table(dev)).OK() ||
				!WaitFor(10*time.Second, func() bool { _, err := os.Stat("/dev/mapper/srpmp"); return err == nil }) {
				c.Fatalf("dmsetup create srpmp failed")
			}
			schedNone(m.block())
			c.Pass("/dev/mapper/srpmp (%s, scheduler none) over %s: %s", m.block(), dev, strings.TrimSpace(Quiet("dmsetup", "table", "srpmp").Text))
		}) {
			h = s.runCycles(t, m, h)
			l.Run("dmsetup", "--noudevsync", "remove", "srpmp")
		}
		_ = l.LogoutHost(h)
	}
	s.waitQuiet(20*time.Second, before.FDs)
	s.checkResources(t, "cycles: resources", before, ResourcesOf(s.d.PID), s.bounds, s.scT0)
	s.checkDaemon(t, "cycles: daemon")
}

// runCycles runs the cycles under the fio loop on srpmp, its checks; the host of the last login.
func (s *stress) runCycles(t *testing.T, m *dm, h string) string {
	l := s.lab
	loop := l.StartFioLoop("cycles", "--name=cycles", "--filename=/dev/mapper/srpmp", "--direct=1", "--sync=1",
		"--rw=randwrite", "--bs=4k", "--iodepth=64", "--iodepth_batch=32", "--size=8M", "--verify_backlog=256")
	done, withIO, fail := 0, 0, ""
	var mid Resources
	for i := 1; i <= s.cycles && fail == ""; i++ {
		d := filepath.Base(HostDev(h, 0))
		w0, _ := DiskWrites(d)
		// I/O on this path before it goes away (the first run may still be starting)
		WaitFor(20*time.Second, func() bool { w, _ := DiskWrites(d); return w > w0+16 })
		time.Sleep(time.Second)
		if w1, _ := DiskWrites(d); w1 > w0 {
			withIO++
		}
		if err := l.LogoutHost(h); err != nil {
			fail = fmt.Sprintf("cycle %d: logout of %s failed: %v", i, h, err)
			break
		}
		time.Sleep(time.Duration((i*7)%3+1) * time.Second)
		var err error
		for try := 1; try <= 3; try++ {
			if h, err = s.login("ch_count=2", "0 1"); err == nil {
				break
			}
			l.Printf("cycle %d: login attempt %d failed: %v", i, try, err)
			time.Sleep(2 * time.Second)
		}
		if err != nil {
			fail = fmt.Sprintf("cycle %d: login failed 3 times: %v", i, err)
			break
		}
		dev := HostDev(h, 0)
		schedNone(dev)
		if !m.switchTo(dev) {
			fail = fmt.Sprintf("cycle %d: switching the multipath table to %s failed", i, dev)
			break
		}
		done = i
		if i == (s.cycles+3)/4 {
			time.Sleep(time.Second)
			mid = ResourcesOf(s.d.PID)
		}
		l.Printf("SRPTVM: cycle %d done: path now %s (%s); dmsetup status: %s", i, dev, h, strings.TrimSpace(Quiet("dmsetup", "status", "srpmp").Text))
	}
	end := ResourcesOf(s.d.PID)
	if !loop.Stop(300 * time.Second) {
		// the multipath device may be queueing for a path that never came
		l.Run("dmsetup", "message", "srpmp", "0", "fail_if_no_path")
		loop.Stop(60 * time.Second)
	}
	l.Check(t, fmt.Sprintf("cycles: %d logout/login cycles", s.cycles), func(c *C) {
		if done != s.cycles || fail != "" {
			c.Fatalf("%s (stopped after %d cycles)", fail, done)
		}
		c.Pass("%d cycles in %s s; writes went to the path before %d of %d logouts", s.cycles, Since(s.scT0), withIO, s.cycles)
	})
	l.Check(t, "cycles: fio verify", func(c *C) {
		what, ok := loop.Verified()
		if !ok {
			c.Fatal(what)
		}
		c.Pass("%s (8 MiB of 4 KiB O_SYNC random writes each, iodepth 64)", what)
	})
	if mid.Threads > 0 {
		s.checkResources(t, fmt.Sprintf("cycles: growth over cycles %d-%d", (s.cycles+3)/4, done), mid, end, s.repeat, 0)
	}
	return h
}
