//go:build vmguest

package checks

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var (
	reconnectFailed    = regexp.MustCompile(`reconnect attempt.*failed`)
	reconnectSucceeded = regexp.MustCompile(`reconnect succeeded`)
)

// relogin: a logout (the daemon closes the channels and keeps running), a login again, the
// memory LUN's data kept while the daemon runs.
func (s *e2e) relogin(t *testing.T) {
	l := s.lab
	l.Group(t, "logout and login again", "logout and login again", func(t *testing.T) {
		var p *Pattern
		var closed0 int64
		l.Check(t, "srp logout", func(c *C) {
			s.needSession(c)
			var err error
			if p, err = WritePattern(s.dev[0], 100, 4); err != nil {
				c.Fatalf("pattern before logout: %v", err)
			}
			if closed0, err = s.d.Stat("channels_closed"); err != nil {
				c.Fatal(err)
			}
			s.logout(c)
		})
		// the daemon closes its channels when the initiator's disconnect reaches it
		l.Check(t, "daemon after logout", func(c *C) {
			s.needDaemon(c)
			var closed int64
			WaitFor(10*time.Second, func() bool {
				n, err := s.d.Stat("channels_closed")
				closed = n - closed0
				return err == nil && closed >= 2
			})
			if !s.d.Alive() || closed < 2 {
				c.Fatalf("alive: %v; channels closed (srptarget stats): %d%s", s.d.Alive(), closed, s.d.Gone())
			}
			c.Pass("running; %d channels closed (srptarget stats)", closed)
		})
		l.Check(t, "srp login again", func(c *C) { s.checkLogin(c, "ch_count=2") })
		l.Check(t, "TEST UNIT READY", func(c *C) { s.needSession(c); s.tur(c) })
		l.Check(t, "memory LUN data kept", func(c *C) {
			s.needSession(c)
			kept(c, p, s.dev[0], "4 MiB written before the logout read back (sha256)")
		})
	})
}

// restart: SIGTERM while the initiator is attached (exit 0), a new daemon, ib_srp reconnects
// by itself; a write issued during the outage completes; the file LUN's data survived.
func (s *e2e) restart(t *testing.T) {
	l := s.lab
	l.Group(t, "restart", "SIGTERM and restart of srptarget while the initiator is attached", func(t *testing.T) {
		var p *Pattern
		var kmark int
		l.Check(t, "SIGTERM while attached", func(c *C) { p, kmark = s.stopAttached(c) })
		l.Printf("SRPTVM: ---- srptarget instance %d ended", s.instance)
		// I/O issued while no target runs: ib_srp queues it until it reconnects
		// (fast_io_fail_tmo bounds the wait).
		outage := startWrite(s.dev[1], 300, 4)
		time.Sleep(time.Second)
		var t0 time.Duration
		l.Check(t, "srptarget restarted", func(c *C) {
			t0 = Uptime()
			detail, err := s.startDaemon(c)
			if err != nil {
				c.Fatal(err)
			}
			c.Pass("%s", detail)
		})
		l.Check(t, "initiator reconnected", func(c *C) { s.checkReconnected(c, kmark, t0) })
		s.dev = [2]string{"/dev/" + DiskForLUN(0), "/dev/" + DiskForLUN(1)}
		l.Check(t, "write during outage", func(c *C) {
			outage.wait(c, 60*time.Second)
			kept(c, outage.p, s.dev[1], "4 MiB written while the target was down completed after the reconnect and reads back")
		})
		l.Check(t, "file LUN data kept", func(c *C) {
			kept(c, p, s.dev[1], "8 MiB written before SIGTERM read back from the file LUN (sha256)")
		})
		l.Check(t, "fio after reconnect", func(c *C) {
			s.needSession(c)
			s.checkFio(c, l.Fio("--direct=1", "--name=after", "--filename="+s.dev[0], "--rw=randwrite", "--bs=16k",
				"--iodepth=16", "--size=32M", "--io_size=4M"))
		})
		l.Step("logout")
		l.Check(t, "srp logout after restart", s.logout)
	})
}

// stopAttached sets ib_srp's reconnect timers, writes a pattern to the file LUN and stops the
// daemon with SIGTERM; the pattern and the kernel log's mark.
func (s *e2e) stopAttached(c *C) (*Pattern, int) {
	l := s.lab
	s.needSession(c)
	for _, rp := range RemotePorts() {
		_ = l.Write(rp+"/reconnect_delay", l.Arg("reconnect_delay", "2"))
		_ = l.Write(rp+"/fast_io_fail_tmo", l.Arg("fast_io_fail_tmo", "40"))
		l.Printf("%s: reconnect_delay %s, fast_io_fail_tmo %s, dev_loss_tmo %s, state %s", rp, readTrim(rp+"/reconnect_delay"),
			readTrim(rp+"/fast_io_fail_tmo"), readTrim(rp+"/dev_loss_tmo"), readTrim(rp+"/state"))
	}
	p, err := WritePattern(s.dev[1], 200, 8)
	if err != nil {
		c.Fatalf("pattern before restart: %v", err)
	}
	kmark := KMark()
	s.stop(c)
	return p, kmark
}

// checkReconnected: ib_srp's remote port running again and both LUNs back, by themselves.
func (s *e2e) checkReconnected(c *C, kmark int, t0 time.Duration) {
	ok := WaitFor(60*time.Second, func() bool { return RportState() == "running" }) &&
		WaitFor(30*time.Second, func() bool { return DiskForLUN(0) != "" && DiskForLUN(1) != "" })
	since := KSince(kmark)
	s.lab.Printf("%s", strings.Join(since, "\n"))
	if !ok {
		c.Fatalf("rport state '%s' 60 s after the restart", RportState())
	}
	c.Pass("rport %s %s s after the restart; %d failed attempt(s) before; %s", RportState(), Since(t0),
		len(Grep(since, reconnectFailed)), firstMatch(since, reconnectSucceeded))
}

// write is a pattern written in the background (dd), to a target that may be away.
type write struct {
	p   *Pattern
	dd  *exec.Cmd
	err error
}

func startWrite(dev string, offMiB, mib int) *write {
	w := &write{}
	if w.p, w.err = NewPattern(mib); w.err == nil {
		w.dd = w.p.Cmd(dev, offMiB)
		w.err = w.dd.Start()
	}
	return w
}

// wait fails the check unless the write completes within d.
func (w *write) wait(c *C, d time.Duration) {
	if w.err != nil {
		c.Fatalf("dd: %v", w.err)
	}
	done := make(chan error, 1)
	go func() { done <- w.dd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			c.Fatalf("dd: %v", err)
		}
	case <-time.After(d):
		_ = w.dd.Process.Kill()
		c.Fatalf("dd still blocked after %v", d)
	}
}

// kept passes when the pattern reads back from dev.
func kept(c *C, p *Pattern, dev, what string) {
	if p == nil {
		c.Fatalf("no pattern was written")
	}
	if err := p.Same(dev); err != nil {
		c.Fatal(err)
	}
	c.Pass("%s", what)
}

// largeIO: a fresh login with opts, 4 MiB requests allowed, fio 4 MiB random writes with verify
// on LUN 0, logout. The write count and sectors of /sys/block/sdX/stat show the commands' size.
//
// cmd_sg_entries=1: at most one descriptor inside SRP_CMD; a 4 MiB buffer needs two memory
// registrations (512 pages each), so ib_srp sends an external indirect table (allow_ext_sg=1)
// that the target fetches with RDMA READ. cmd_sg_entries=255: the table inside SRP_CMD.
func (s *e2e) largeIO(t *testing.T, name, opts string) {
	l := s.lab
	l.Group(t, "4M "+name, fmt.Sprintf("4 MiB writes: %s", opts), func(t *testing.T) {
		var kmark int
		if !l.Check(t, "login "+name, func(c *C) { s.checkLogin(c, "ch_count=2,"+opts) }) {
			return
		}
		d := filepath.Base(s.dev[0])
		_ = l.Write("/sys/block/"+d+"/queue/max_sectors_kb", "4096")
		q := func(a string) string { return readTrim("/sys/block/" + d + "/queue/" + a) }
		l.Printf("%s: max_sectors_kb %s, max_hw_sectors_kb %s, max_segments %s; host sg_tablesize %s, cmd_sg_entries %s, allow_ext_sg %s",
			d, q("max_sectors_kb"), q("max_hw_sectors_kb"), q("max_segments"), HostAttr(s.host, "sg_tablesize"),
			HostAttr(s.host, "cmd_sg_entries"), HostAttr(s.host, "allow_ext_sg"))
		kmark = KMark()
		ios, secs := DiskWrites(d)
		l.Check(t, "fio 4M "+name, func(c *C) {
			s.checkFio(c, l.Fio("--direct=1", "--name=large-"+name, "--filename="+s.dev[0], "--rw=randwrite",
				"--bs=4M", "--iodepth=4", fmt.Sprintf("--size=%dM", l.ArgInt("large_mib", 128))))
		})
		l.Check(t, "4M commands "+name, func(c *C) {
			ios2, secs2 := DiskWrites(d)
			if ios2 <= ios {
				c.Fatalf("no WRITE commands")
			}
			avg := (secs2 - secs) * 512 / 1024 / (ios2 - ios)
			if avg < 4096 {
				c.Fatalf("%d WRITE commands of %d KiB on average: the 4 MiB writes were split", ios2-ios, avg)
			}
			c.Pass("%d WRITE commands, %d KiB each on average; host cmd_sg_entries %s, allow_ext_sg %s, sg_tablesize %s", ios2-ios, avg,
				HostAttr(s.host, "cmd_sg_entries"), HostAttr(s.host, "allow_ext_sg"), HostAttr(s.host, "sg_tablesize"))
		})
		l.Check(t, "kernel log "+name, func(c *C) {
			if errs := KernelErrors(kmark); len(errs) > 0 {
				l.Printf("%s", strings.Join(errs, "\n"))
				c.Fatalf("%s", Unstamped(errs[0]))
			}
			c.Pass("no error lines during the run")
		})
		l.Check(t, "logout "+name, s.logout)
	})
}
