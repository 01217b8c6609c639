//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// devdel, instance 4 (not with quick=1): `rdma link del rxe0` while the initiator is logged in
// and writing: the command must complete (rxe cannot revoke a process's verbs contexts, so it
// waits until the daemon has closed them), the daemon stays up, logs it and holds no verbs
// device file any more; `rdma link add` brings rxe0 back and the daemon serves logins on its
// wildcard listener without being told; its listener on the specific address
// 169.254.50.1:port2 failed with the device and listens again after SIGHUP (configs/README.md).
// Data written before the removal reads back. Then SIGQUIT for the goroutines. If `rdma link
// del` is still blocked after 90 s, the daemon gets SIGTERM (then SIGKILL after 40 s) so that
// the run can go on, and the checks after it say so.
func (s *stress) devdel(t *testing.T) {
	l := s.lab
	if s.d == nil || !s.d.Alive() {
		if err := s.start(s.config); err != nil {
			l.Printf("SRPTVM: %v", err)
		}
	}
	l.LogoutAll()
	// Warm-up, as instance 2's: a session creates the buffer pool and the device context of a
	// fresh instance (only=devdel), and LUN 0 is filled, so that the quiet state below
	// includes them and the resource check after the re-add sees only what the removal left
	// behind (a second buffer pool beside the dead one, say).
	if h, ok := s.loginWait(t, "devdel: warm-up login", "ch_count=1", "0 1"); ok {
		r := l.Fio("--name=fill", "--filename="+HostDev(h, 0), "--direct=1", "--rw=write", "--bs=1M", "--iodepth=8",
			fmt.Sprintf("--size=%dM", stressL0MiB), "--verify=0")
		l.Printf("SRPTVM: LUN 0 filled: %s", r.Summary())
		l.LogoutAll()
	}
	WaitFor(20*time.Second, func() bool { return s.openChannels() == 0 })
	time.Sleep(2 * time.Second)
	q0 := ResourcesOf(s.d.PID)
	l.Printf("SRPTVM: quiet before the removal: %s; open files: %s", q0, FDKinds(s.d.PID))
	killed := false
	if h, ok := s.loginWait(t, "devdel: login", "ch_count=2", "0 1"); ok {
		killed = s.removal(t, h)
		s.afterRemoval(t, killed)
	}
	s.waitQuiet(30*time.Second, q0.FDs)
	if killed {
		l.Check(t, "devdel: resources", func(c *C) {
			c.Fatalf("not comparable: the daemon had to be stopped for rdma link del to finish")
		})
	} else {
		s.checkResources(t, "devdel: resources", q0, ResourcesOf(s.d.PID), s.bounds, s.scT0)
	}
	s.checkDaemon(t, "devdel: daemon")
	s.checkGoroutines(t, "devdel: goroutines")
}

// uverbs is the verbs device files a process has open, and its mappings of them.
func uverbs(pid int) (fds, maps int) {
	fds = strings.Count(FDKinds(pid), "/dev/infiniband/uverbs")
	for _, line := range readLines(fmt.Sprintf("/proc/%d/maps", pid)) {
		if strings.Contains(line, "uverbs") {
			maps++
		}
	}
	return fds, maps
}

// removal deletes rxe0 under the session and I/O in flight; killed says whether the daemon had
// to be stopped for the removal to finish.
func (s *stress) removal(t *testing.T, h string) (killed bool) {
	l := s.lab
	dev := HostDev(h, 0)
	s.fioCheck(t, "devdel: data before the removal", "synchronized (fsync) before the removal", "--name=devdelA",
		"--filename="+dev, "--direct=1", "--rw=write", "--bs=64k", "--size=16M", "--offset=0", "--do_verify=0", "--end_fsync=1")
	// Through the SCSI generic device, not the block device: once the initiator's disk is
	// deleted the block layer sets its capacity to 0, so a direct read of it returns 0 bytes and
	// fio verifies the stale contents of its buffer, reporting "bad header" for data no target
	// sent (TestBlockDel shows it on a scsi_debug disk); through /dev/sgN those
	// commands fail with an error instead, so a verify error is wrong data.
	sgs, _ := os.ReadDir("/sys/block/" + filepath.Base(dev) + "/device/scsi_generic")
	sg := "/dev/"
	if len(sgs) > 0 {
		sg += sgs[0].Name()
	}
	inflight := l.startFio("--name=inflight", "--filename="+sg, "--ioengine=sg", "--rw=randwrite", "--bs=16k", "--iodepth=16",
		"--size=16M", "--offset=32M", "--verify_backlog=64", "--time_based", "--runtime=60")
	time.Sleep(3 * time.Second)
	l.Printf("SRPTVM: daemon open files with the session: %s", FDKinds(s.d.PID))
	for _, r := range []string{"qp", "cq", "mr", "pd"} {
		for _, line := range Quiet("rdma", "resource", "show", r).Lines() {
			if strings.Contains(line, "comm "+filepath.Base(s.bin)) {
				l.Printf("%s", line)
			}
		}
	}
	liveUV, _ := uverbs(s.d.PID)
	dmark, kmark, closed0 := s.d.LogMark(), KMark(), s.stat("channels_closed")
	t0 := Uptime()
	l.Printf("SRPTVM$ rdma link del %s", s.rxe.Name)
	del := exec.Command("rdma", "link", "del", s.rxe.Name)
	out := &strings.Builder{}
	del.Stdout, del.Stderr = out, out
	done := make(chan error, 1)
	if err := del.Start(); err != nil {
		done <- err
	} else {
		go func() { done <- del.Wait() }()
	}
	select {
	case err := <-done:
		l.Check(t, "devdel: rdma link del under a live session", func(c *C) {
			if err != nil {
				c.Fatalf("%v after %s s: %s", err, Since(t0), out)
			}
			c.Pass("exit 0 after %s s", Since(t0))
		})
	case <-time.After(90 * time.Second):
		killed = true
		s.blockedRemoval(t, del, done, t0, kmark)
	}
	time.Sleep(2 * time.Second)
	since := KSince(kmark)
	l.Printf("%s", strings.Join(since[:min(40, len(since))], "\n"))
	if !killed {
		s.checkRemovalSeen(t, liveUV, dmark, closed0)
	}
	l.Check(t, "devdel: I/O in flight at the removal", func(c *C) {
		r, ok := inflight.wait(120 * time.Second)
		switch {
		case !ok:
			c.Fatalf("fio still running 120 s after the removal")
		// the initiator's own device went away too: I/O errors are expected, wrong data is not
		case r.VerifyErrors != 0 || r.Writes == 0 || r.Reads == 0:
			c.Fatalf("%s%s", r.Summary(), problem(r.Problem))
		}
		c.Pass("%s through %s (I/O errors expected: ib_srp lost its device too; no verify error)", r.Summary(), sg)
	})
	return killed
}

// stat is a counter of the current instance, -1 when it does not answer.
func (s *stress) stat(name string) int64 {
	n, err := s.d.Stat(name)
	if err != nil {
		return -1
	}
	return n
}

// blockedRemoval: rdma link del still blocked after 90 s; the daemon stopped so that it ends.
func (s *stress) blockedRemoval(t *testing.T, del *exec.Cmd, done chan error, t0 time.Duration, kmark int) {
	l := s.lab
	l.Printf("SRPTVM: rdma link del still running after 90 s: its kernel stack:\n%s", readTrim(fmt.Sprintf("/proc/%d/stack", del.Process.Pid)))
	fds, maps := uverbs(s.d.PID)
	l.Printf("SRPTVM: daemon open files: %s; uverbs mappings: %d", FDKinds(s.d.PID), maps)
	l.Check(t, "devdel: rdma link del under a live session", func(c *C) {
		c.Fatalf("blocked > 90 s: daemon pid %d still holds %d open files of /dev/infiniband/uverbs (rxe cannot revoke them); all open: %s",
			s.d.PID, fds, FDKinds(s.d.PID))
	})
	// SIGTERM first: does a graceful shutdown release them?
	how := "SIGTERM"
	if code, err := s.d.Stop(40 * time.Second); err != nil {
		how = "SIGKILL (still running 40 s after SIGTERM)"
	} else {
		how = fmt.Sprintf("SIGTERM (exit status %d)", code)
	}
	l.Check(t, "devdel: rdma link del once the daemon exits", func(c *C) {
		select {
		case <-done:
			c.Pass("completed %s s after it began, after %s of the daemon", Since(t0), how)
		case <-time.After(60 * time.Second):
			c.Fatalf("still blocked after %s of the daemon", how)
		}
	})
}

// checkRemovalSeen: the daemon stays up, released the device and said so.
func (s *stress) checkRemovalSeen(t *testing.T, liveUV, dmark int, closed0 int64) {
	l := s.lab
	s.checkDaemon(t, "devdel: daemon stays up")
	l.Check(t, "devdel: daemon released the device", func(c *C) {
		fds, maps := uverbs(s.d.PID)
		if fds != 0 || maps != 0 {
			c.Fatalf("%d verbs device files, %d uverbs mappings still open: %s", fds, maps, FDKinds(s.d.PID))
		}
		c.Pass("verbs device files open: %d with the session, 0 after the removal, no uverbs mapping; open files now: %s", liveUV, FDKinds(s.d.PID))
	})
	// ib/verbs logs the removal (through the listeners' Logf) with what it released; channels
	// close with the reason "RDMA device removed" when they see the removal before the
	// initiator's disconnect (ib_srp is on the same device and usually disconnects first).
	l.Check(t, "devdel: daemon logged it", func(c *C) {
		removed := ""
		for _, ln := range s.d.LogLines(MsgDeviceRemoved, dmark) {
			if strings.HasPrefix(ln.Msg, string(MsgDeviceRemoved)+s.rxe.Name) && removed == "" {
				removed = ln.Msg[:min(400, len(ln.Msg))]
			}
		}
		forRemoval := 0
		for _, ln := range s.d.LogLines(MsgChannelClosed, dmark) {
			if ln.Field("reason") == "RDMA device removed" {
				forRemoval++
			}
		}
		listener := "no listener failure logged"
		if ls := s.d.LogLines(MsgListenerFailed, dmark); len(ls) > 0 {
			listener = ls[0].Raw[:min(300, len(ls[0].Raw))]
		}
		closed := s.stat("channels_closed") - closed0
		if removed == "" {
			c.Fatalf("no line names the removal of %s; %d channels closed (srptarget stats), %d for the removal; %s", s.rxe.Name, closed, forRemoval, listener)
		}
		if closed < 2 {
			c.Fatalf("%s; %d channels closed (2 were open; srptarget stats), %d for the removal; %s", removed, closed, forRemoval, listener)
		}
		c.Pass("%s; %d channels closed (srptarget stats; %d for the removal, the others by the initiator's disconnect); %s", removed, closed, forRemoval, listener)
	})
}

// rxeBack adds rxe0 again and waits for its port, its IPv4 GID and ib_srp's add_target.
func (s *stress) rxeBack() error {
	r := s.rxe
	if o := s.lab.Run("rdma", "link", "add", r.Name, "type", "rxe", "netdev", r.Netdev); !o.OK() {
		return fmt.Errorf("rdma link add: %s", o.Text)
	}
	gid, _ := GIDOf(r.IP4)
	if !WaitFor(20*time.Second, func() bool { return strings.Contains(r.port("state"), "ACTIVE") }) ||
		!WaitFor(20*time.Second, func() bool { return r.GIDIndex(gid) >= 0 }) ||
		!WaitFor(20*time.Second, func() bool {
			_, err := os.Stat("/sys/class/infiniband_srp/srp-" + r.Name + "-1/add_target")
			return err == nil
		}) {
		return fmt.Errorf("%s not back: %s", r.Name, Quiet("rdma", "link").Text)
	}
	return nil
}

// afterRemoval: rxe0 back, logins again on the wildcard listener, the data, the specific
// listener after SIGHUP.
func (s *stress) afterRemoval(t *testing.T, killed bool) {
	l := s.lab
	l.Check(t, "devdel: rdma link add", func(c *C) {
		if err := s.rxeBack(); err != nil {
			c.Fatal(err)
		}
		c.Pass("%s back, port active", s.rxe.Name)
	})
	if killed {
		if err := s.start(s.config); err != nil {
			l.Printf("SRPTVM: %v", err)
		}
	}
	t0 := Uptime()
	name := fmt.Sprintf("devdel: serves again on [::]:%d", s.port)
	if h, ok := s.loginWait(t, name, "ch_count=2", "0 1"); ok {
		l.Check(t, name, func(c *C) {
			if killed {
				c.Fatalf("login %s s after, but by a new instance: the first had to be stopped", Since(t0))
			}
			c.Pass("login %s s after, without a reload", Since(t0))
		})
		dev, e := HostDev(h, 0), HostDev(h, 1)
		if !killed {
			s.fioCheck(t, "devdel: data before the removal reads back", "", "--name=devdelA", "--filename="+dev, "--direct=1",
				"--rw=write", "--bs=64k", "--size=16M", "--offset=0", "--verify_only")
		}
		if s.want("kill") {
			s.fioCheck(t, "devdel: file LUN data reads back", "", "--name=regionA", "--filename="+e, "--direct=1",
				"--rw=write", "--bs=64k", "--size=16M", "--offset=0", "--verify_only")
		}
		s.fioCheck(t, "devdel: I/O after rdma link add", "", "--name=afterdel", "--filename="+dev, "--direct=1",
			"--rw=randwrite", "--bs=16k", "--iodepth=16", "--size=8M", "--offset=48M")
		_ = l.LogoutHost(h)
	}
	s.specificListener(t, killed)
}

// specificListener: the listener on the specific address went with the device; SIGHUP listens
// again.
func (s *stress) specificListener(t *testing.T, killed bool) {
	l := s.lab
	dest := fmt.Sprintf("ch_count=1,dest=%s:%d", s.rxe.IP4, s.port2)
	before, after := "", ""
	if h, err := s.login(dest, "0 1"); err == nil {
		before = "logged in without a reload"
		_ = l.LogoutHost(h)
	} else {
		before = fmt.Sprintf("refused before SIGHUP (%v)", err)
		r0 := s.stat("reloads_applied") + s.stat("reloads_failed")
		l.Printf("SRPTVM$ kill -HUP %d", s.d.PID)
		_ = s.d.Signal(syscall.SIGHUP)
		WaitFor(20*time.Second, func() bool { return s.stat("reloads_applied")+s.stat("reloads_failed") > r0 })
		WaitFor(20*time.Second, func() bool { return CMListening(s.port2) })
		if h, err := s.login(dest, "0 1"); err == nil {
			after = "logged in after SIGHUP"
			_ = l.LogoutHost(h)
		} else {
			after = fmt.Sprintf("still refused after SIGHUP: %v; %s", err, s.reloadErrors(0))
		}
	}
	l.Check(t, fmt.Sprintf("devdel: listener %s:%d", s.rxe.IP4, s.port2), func(c *C) {
		switch {
		case killed:
			c.Fatalf("not tested: the instance whose listener failed had to be stopped, and a new one listens from its start (%s)", before)
		case after != "" && after != "logged in after SIGHUP":
			c.Fatalf("%s, %s", before, after)
		}
		if after != "" {
			before += ", " + after
		}
		c.Pass("%s", before)
	})
}
