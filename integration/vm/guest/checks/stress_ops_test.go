//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var (
	reconnectOK = regexp.MustCompile(`reconnect succeeded`)
	hwError     = regexp.MustCompile(`(?i)Hardware Error|Logical unit communication failure`)
)

// resets: every second alternately `sg_reset -d` (LOGICAL UNIT RESET) and `sg_reset -b` (bus
// reset, which ib_srp does not have, so the kernel escalates it to a host reset: ib_srp
// disconnects and logs in again) while fio writes, as blktests srp/014 (which flips a device
// the error handler set offline back to running, counted here).
func (s *stress) resets(t *testing.T) {
	l := s.lab
	before := ResourcesOf(s.d.PID)
	if h, ok := s.loginWait(t, "resets: login", "ch_count=2", "0 1"); ok {
		dev := HostDev(h, 0)
		d := filepath.Base(dev)
		kmark := KMark()
		st0, err := s.d.Stats()
		loop := l.StartFioLoop("resets", "--name=resets", "--filename="+dev, "--direct=1", "--sync=1",
			"--rw=randwrite", "--bs=64k", "--iodepth=16", "--size=16M", "--offset=32M", "--verify_backlog=64")
		WaitFor(20*time.Second, func() bool { w, _ := DiskWrites(d); return w > 16 })
		var lunOK, lunBad, hostOK, hostBad, offline int
		state := "/sys/block/" + d + "/device/state"
		end := time.Now().Add(time.Duration(s.resetSecs) * time.Second)
		for i := 1; time.Now().Before(end); i++ {
			time.Sleep(time.Second)
			kind, ok, bad := "-d", &lunOK, &lunBad
			if i%2 == 0 {
				kind, ok, bad = "-b", &hostOK, &hostBad
			}
			if Quiet("sg_reset", kind, dev).OK() {
				*ok++
			} else {
				*bad++
			}
			// as blktests srp/014: a device the error handler set offline goes back to running
			if readTrim(state) == "offline" {
				_ = os.WriteFile(state, []byte("running"), 0o200)
				offline++
			}
		}
		if !loop.Stop(300 * time.Second) {
			_ = os.WriteFile(state, []byte("running"), 0o200)
			loop.Stop(60 * time.Second)
		}
		l.Check(t, "resets: LUN and host resets", func(c *C) {
			st1, err1 := s.d.Stats()
			if err != nil || err1 != nil {
				c.Fatalf("srptarget stats: %v %v", err, err1)
			}
			reconn := len(Grep(KSince(kmark), reconnectOK))
			tmf, relog := st1["task_mgmt"]-st0["task_mgmt"], st1["logins_accepted"]-st0["logins_accepted"]
			rport := readTrim(RportOf(h) + "/state")
			detail := fmt.Sprintf("sg_reset -d: %d ok, %d failed; sg_reset -b: %d ok, %d failed; kernel: %d reconnects; daemon (srptarget stats): %d task management functions, %d logins accepted; device set offline %d time(s); rport %s",
				lunOK, lunBad, hostOK, hostBad, reconn, tmf, relog, offline, rport)
			if lunBad != 0 || hostBad != 0 || reconn < 1 || tmf < 1 || rport != "running" {
				c.Fatal(detail)
			}
			c.Pass("%s", detail)
		})
		s.checkLoop(t, "resets: fio verify", loop, "16 MiB of 64 KiB O_SYNC random writes each, iodepth 16")
		_ = l.LogoutHost(h)
	}
	s.waitQuiet(30*time.Second, before.FDs)
	s.checkResources(t, "resets: resources", before, ResourcesOf(s.d.PID), s.bounds, s.scT0)
	s.checkDaemon(t, "resets: daemon")
}

// checkLoop is a check that a fio loop verified without error.
func (s *stress) checkLoop(t *testing.T, name string, loop *FioLoop, what string) {
	s.lab.Check(t, name, func(c *C) {
		v, ok := loop.Verified()
		if !ok {
			c.Fatal(v)
		}
		c.Pass("%s (%s)", v, what)
	})
}

// reload: SIGHUP every 2 s (reloads=, 4 with quick=1, else 10) alternating between the
// configuration and one that gives LUN 0 and LUN 1 a vendor string, so that each reload
// replaces both logical units (over the same backstores) while fio writes and verifies on
// LUN 1: every reload must succeed, fio must verify without error, and no command may fail
// because its logical unit was retired (configs/README.md, "Reloading").
func (s *stress) reload(t *testing.T) {
	l := s.lab
	before := ResourcesOf(s.d.PID)
	a, err := os.ReadFile(s.config)
	cfgB := strings.Replace(string(a), "    serial: stress0\n", "    serial: stress0\n    vendor: RELOADB\n", 1)
	cfgB = strings.Replace(cfgB, "    serial: stress1\n", "    serial: stress1\n    vendor: RELOADB\n", 1)
	fileB := stressDir + "/reload-b.yaml"
	if err == nil {
		err = os.WriteFile(fileB, []byte(cfgB), 0o644)
	}
	if o := Quiet(s.bin, "validate", "--config", fileB); err != nil || strings.Count(cfgB, "RELOADB") != 2 || !o.OK() {
		l.Check(t, "reload: configuration B", func(c *C) { c.Fatalf("%v %s", err, o.Text) })
	} else if h, ok := s.loginWait(t, "reload: login", "ch_count=2", "0 1"); ok {
		s.runReloads(t, h, string(a), cfgB)
		_ = l.LogoutHost(h)
	}
	s.waitQuiet(20*time.Second, before.FDs)
	s.checkResources(t, "reload: resources", before, ResourcesOf(s.d.PID), s.bounds, s.scT0)
	s.checkDaemon(t, "reload: daemon")
}

// runReloads sends the SIGHUPs under the fio loop and checks them.
func (s *stress) runReloads(t *testing.T, h, cfgA, cfgB string) {
	l := s.lab
	st0, err := s.d.Stats()
	if err != nil {
		l.Check(t, fmt.Sprintf("reload: %d reloads", s.reloads), func(c *C) { c.Fatal(err) })
		return
	}
	dmark := s.d.LogMark()
	loop := l.StartFioLoop("reload", "--name=reload", "--filename="+HostDev(h, 1), "--direct=1",
		"--rw=randwrite", "--bs=64k", "--iodepth=16", "--size=32M", "--offset=128M")
	nhup := 0
	hup := func(cfg string) bool {
		if os.WriteFile(s.config, []byte(cfg), 0o644) != nil || s.d.Signal(syscall.SIGHUP) != nil {
			return false
		}
		nhup++
		return WaitFor(20*time.Second, func() bool {
			st, err := s.d.Stats()
			return err == nil && st["reloads_applied"]+st["reloads_failed"]-st0["reloads_applied"]-st0["reloads_failed"] >= int64(nhup)
		})
	}
	for i := 1; i <= s.reloads; i++ {
		time.Sleep(2 * time.Second)
		cfg := cfgA
		if i%2 == 1 {
			cfg = cfgB
		}
		if !hup(cfg) {
			break
		}
	}
	if nhup%2 == 1 {
		hup(cfgA)
	}
	_ = os.WriteFile(s.config, []byte(cfgA), 0o644)
	loop.Stop(300 * time.Second)
	st1, err := s.d.Stats()
	l.Check(t, fmt.Sprintf("reload: %d reloads", nhup), func(c *C) {
		if err != nil {
			c.Fatal(err)
		}
		nok, nfail := st1["reloads_applied"]-st0["reloads_applied"], st1["reloads_failed"]-st0["reloads_failed"]
		if nok != int64(nhup) || nfail != 0 {
			c.Fatalf("%d reloaded, %d failed (srptarget stats): %s", nok, nfail, s.reloadErrors(dmark))
		}
		c.Pass("%d reloads applied (srptarget stats; LUN 0 and LUN 1 replaced each time); %d retired unit(s) had commands in progress and closed after them",
			nok, len(s.d.LogLines(MsgRetiredAfterCommands, dmark)))
	})
	s.checkLoop(t, "reload: fio verify", loop, "while the units were replaced")
	l.Check(t, "reload: no command failed by the retirement", func(c *C) {
		late := len(s.d.LogLines(MsgRetiredWithCommands, dmark))
		sense := len(Grep(KSince(s.scKmark), hwError))
		if late != 0 || sense != 0 {
			c.Fatalf("%d late closes in the daemon's log, %d HARDWARE ERROR / LOGICAL UNIT COMMUNICATION FAILURE lines in the kernel's", late, sense)
		}
		c.Pass("no %q in the daemon's log, no HARDWARE ERROR sense in the kernel's", MsgRetiredWithCommands)
	})
}

// reloadErrors is the daemon's first line on a failed reload after the mark.
func (s *stress) reloadErrors(mark int) string {
	for _, m := range []Msg{MsgConfigError, MsgReloadFailed} {
		if ls := s.d.LogLines(m, mark); len(ls) > 0 {
			return ls[0].Raw[:min(300, len(ls[0].Raw))]
		}
	}
	return "no failure logged"
}

// rejectsScenario: logins the target must refuse, alternately with a wrong target port
// identifier (id_ext) and from an initiator port no ACL admits; then a good login still works.
func (s *stress) rejectsScenario(t *testing.T) {
	l := s.lab
	before := ResourcesOf(s.d.PID)
	hosts0, dmark := len(SCSIHosts()), s.d.LogMark()
	rej0, err := s.d.Stat("logins_rejected")
	badTarget := fmt.Sprintf("id_ext=%s,ioc_guid=%s,dest=%s:%d", badExt, s.idExt, s.rxe.IP4, s.port)
	badACL := fmt.Sprintf("id_ext=%s,ioc_guid=%s,initiator_ext=%s,dest=%s:%d", s.idExt, s.idExt, badExt, s.rxe.IP4, s.port)
	l.Printf("SRPTVM: odd logins: %s; even: %s", badTarget, badACL)
	Quiet("dmesg", "-n", "1") // the kernel logs each refusal
	refused, accepted, q := 0, 0, (s.rejects+3)/4
	var errs []string
	var mid Resources
	t0 := Uptime()
	f := "/sys/class/infiniband_srp/srp-" + s.rxe.Name + "-1/add_target"
	for i := 1; i <= s.rejects; i++ {
		o := badACL
		if i%2 == 1 {
			o = badTarget
		}
		if e := os.WriteFile(f, []byte(o), 0o200); e == nil {
			accepted++
		} else {
			refused++
			if i <= 2 {
				errs = append(errs, unwrapPath(e).Error())
			}
		}
		if i == q {
			WaitFor(10*time.Second, func() bool { return s.openChannels() == 0 })
			mid = ResourcesOf(s.d.PID)
		}
	}
	secs := (Uptime() - t0).Seconds()
	Quiet("dmesg", "-n", "4")
	s.waitQuiet(20*time.Second, before.FDs)
	end := ResourcesOf(s.d.PID)
	l.Check(t, fmt.Sprintf("rejects: %d logins refused", s.rejects), func(c *C) {
		s.checkRejects(c, refused, accepted, hosts0, dmark, secs, errs)
	})
	l.Check(t, "rejects: counted", func(c *C) {
		rej1, err1 := s.d.Stat("logins_rejected")
		if err != nil || err1 != nil {
			c.Fatalf("%v %v", err, err1)
		}
		if rej1-rej0 != int64(s.rejects) {
			c.Fatalf("srptarget stats: logins_rejected +%d, want +%d", rej1-rej0, s.rejects)
		}
		c.Pass("srptarget stats: logins_rejected +%d", rej1-rej0)
	})
	l.Printf("SRPTVM: kernel lines for the first two refusals:\n%s", strings.Join(KSince(s.scKmark)[:min(8, len(KSince(s.scKmark)))], "\n"))
	if mid.Threads > 0 {
		s.checkResources(t, fmt.Sprintf("rejects: growth over logins %d-%d", q, s.rejects), mid, end, s.repeat, 0)
	}
	s.checkResources(t, "rejects: resources", before, end, s.bounds, s.scT0)
	t1 := Uptime()
	if h, ok := s.loginWait(t, "rejects: good login afterwards", "ch_count=2", "0 1"); ok {
		s.fioCheck(t, "rejects: good login afterwards", "login after the refusals: "+Since(t1)+" s",
			"--name=afterrej", "--filename="+HostDev(h, 0), "--direct=1", "--rw=randwrite", "--bs=16k", "--iodepth=16", "--size=8M", "--offset=48M")
		_ = l.LogoutHost(h)
	}
	s.checkDaemon(t, "rejects: daemon")
}

// checkRejects: every login refused, no SCSI host made, and the daemon's log of the refusals
// rate-limited: per source address at most 5 lines per 10 s, the next saying how many it left
// out (similar_lines_suppressed; lib/loglimit): every refusal here comes from one
// address, so a few lines per 10 s, not one per login.
func (s *stress) checkRejects(c *C, refused, accepted, hosts0, dmark int, secs float64, errs []string) {
	lines := s.d.LogLines(MsgLoginRejected, dmark)
	reasons := map[string]int{}
	suppressed := 0
	for _, ln := range lines {
		r, _, _ := strings.Cut(ln.Field("reason"), " ")
		reasons[r]++
		var n int
		fmt.Sscan(ln.Field("similar_lines_suppressed"), &n)
		suppressed += n
	}
	maxLines := 5 * (int(secs/10) + 2)
	hosts1 := len(SCSIHosts())
	detail := fmt.Sprintf("daemon logged %d rejections (at most %d at 5 per 10 s), %d more said suppressed: %v", len(lines), maxLines, suppressed, reasons)
	if refused != s.rejects || hosts1 != hosts0 || len(lines) < 1 || len(lines) > maxLines || len(lines)+suppressed > s.rejects || !s.d.Alive() {
		c.Fatalf("%d refused, %d accepted, SCSI hosts %d -> %d; %s", refused, accepted, hosts0, hosts1, detail)
	}
	c.Pass("in %.1f s; add_target failed each time (%s); %s", secs, strings.Join(errs, " "), detail)
}
