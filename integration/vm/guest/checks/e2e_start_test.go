//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// start: the binary, soft-RoCE, the configuration, the daemon and what it says before a login.
func (s *e2e) start(t *testing.T) {
	l := s.lab
	l.Step("srptarget binary")
	l.Check(t, "srptarget binary", s.checkBinary)
	l.Step("soft-RoCE")
	l.Check(t, "rxe", func(c *C) {
		r := s.needRXE(c)
		c.Pass("%s on %s, node GUID %s, %s, %s", r.Name, r.Netdev, r.GUID, r.IP4, r.IP6)
	})
	l.Step("configuration %s", e2eConfig)
	l.Check(t, "srptarget validate", func(c *C) {
		s.needRXE(c)
		if err := s.prepare(); err != nil {
			c.Abort("%v", err)
		}
		l.Printf("%s", s.config)
		o := l.Run(s.bin, "validate", "--config", e2eConfig)
		if !o.OK() || len(o.Lines()) == 0 {
			c.Fatalf("exit %d: %s", o.Code, o.Text)
		}
		c.Pass("%s", o.Lines()[0])
	})
	l.Step("srptarget serve")
	l.Check(t, "srptarget listening", func(c *C) {
		detail, err := s.startDaemon(c)
		if err != nil {
			c.Abort("srptarget is not listening: %v", err)
		}
		c.Pass("%s", detail)
	})
	l.Check(t, "Go sysmon awake", s.checkSysmon)
	l.Check(t, "file LUN created sparse", func(c *C) {
		s.needDaemon(c)
		lun := e2eLUNs[1]
		fi, err := os.Stat(lun.path)
		if err != nil {
			c.Fatalf("%v", err)
		}
		alloc := allocated(lun.path)
		if fi.Size() != int64(lun.mib)<<20 || alloc >= 1<<20 {
			c.Fatalf("%s: size %d (want %d), %d bytes allocated", lun.path, fi.Size(), lun.mib<<20, alloc)
		}
		c.Pass("%s: %d bytes, %d allocated", lun.path, fi.Size(), alloc)
	})
	l.Check(t, "login-line", func(c *C) {
		s.needDaemon(c)
		id, ioc, out := s.loginLine()
		switch {
		case id == "":
			c.Fatalf("no line with dest=%s:%d: %s", s.rxe.IP4, s.port, out)
		case id != s.rxe.GUID || ioc != s.rxe.GUID:
			c.Fatalf("id_ext=%s ioc_guid=%s, want the node GUID of rxe0 %s", id, ioc, s.rxe.GUID)
		}
		s.loginOpts = fmt.Sprintf("id_ext=%s,ioc_guid=%s,dest=%s:%d", id, ioc, s.rxe.IP4, s.port)
		c.Pass("%s (the node GUID of rxe0)", s.loginOpts)
	})
}

// checkBinary: the daemon's binary is there and links librdmacm (a build without cgo has no
// RDMA back end and cannot listen); the image has every library it needs.
func (s *e2e) checkBinary(c *C) {
	fi, err := os.Stat(s.bin)
	if err != nil {
		c.Abort("%s is absent: build srptarget on the host and pass it in, e.g. SRPT_VM_FILES=\"bin/srptarget:%s\" (integration/vm/e2e.sh does)", s.bin, s.bin)
	}
	if fi.Mode()&0o111 == 0 {
		c.Abort("%s is not executable", s.bin)
	}
	libs := Quiet("/lib64/ld-linux-x86-64.so.2", "--list", s.bin).Lines()
	var needs, missing []string
	for _, line := range libs {
		f := strings.Fields(line)
		switch {
		case strings.Contains(line, "not found"):
			missing = append(missing, f[0])
		case strings.Contains(line, "=>"):
			needs = append(needs, f[0])
		}
	}
	if len(missing) > 0 {
		c.Abort("%s needs libraries the image does not have: %s", s.bin, strings.Join(missing, " "))
	}
	if !strings.Contains(strings.Join(needs, " "), "librdmacm.so") {
		c.Abort("%s does not link librdmacm (built without cgo?): needs %s", s.bin, strings.Join(needs, " "))
	}
	version := Quiet(s.bin, "version").Lines()
	if len(version) == 0 {
		c.Abort("%s version printed nothing", s.bin)
	}
	c.Pass("%d bytes, %s, needs %s", fi.Size(), version[0], strings.Join(needs, " "))
}

// checkSysmon: Go's sysmon is kept awake (internal/daemon/sysmon.go): the daemon executed itself
// again, same PID, with schedtrace in GODEBUG; idle, its threads then wake about 100 times a
// second.
func (s *e2e) checkSysmon(c *C) {
	d := s.needDaemon(c)
	env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", d.PID))
	godebug := ""
	for _, v := range strings.Split(string(env), "\x00") {
		if strings.HasPrefix(v, "GODEBUG=") {
			godebug = v
			break
		}
	}
	c0 := voluntarySwitches(d.PID)
	time.Sleep(2 * time.Second)
	n := voluntarySwitches(d.PID) - c0
	if !strings.Contains(godebug, "schedtrace=2147483647") || n < 100 {
		c.Fatalf("environment: %s; idle: %d thread wake-ups in 2 s (want >= 100)", godebug, n)
	}
	c.Pass("%s; idle: %d thread wake-ups/s", godebug, n/2)
}

// attach: the first login, with two channels.
func (s *e2e) attach(t *testing.T) {
	l := s.lab
	l.Step("ib_srp login, ch_count=2")
	l.Check(t, "srp login", func(c *C) {
		s.needDaemon(c)
		detail, err := s.firstLogin(c)
		if err != nil {
			l.Printf("%s", strings.Join(KSince(s.kmark), "\n"))
			c.Abort("login failed: %v", err)
		}
		c.Pass("%s", detail)
	})
	time.Sleep(time.Second) // the SCSI scan's last commands and their kernel messages
	l.Printf("%s", strings.Join(KSince(s.kmark), "\n"))
	l.Check(t, "2 channels", func(c *C) {
		s.needSession(c)
		st, err := s.d.Stats()
		if err != nil {
			c.Fatal(err)
		}
		acc, err1 := st.Get("logins_accepted")
		open, err2 := st.Get("channels_open")
		if err1 != nil || err2 != nil {
			c.Fatalf("%v %v", err1, err2)
		}
		chs := HostAttr(s.host, "ch_count")
		if chs != "2" || acc-s.accepted0 != 2 || open != 2 {
			c.Fatalf("ib_srp ch_count %s; daemon (srptarget stats): %d logins accepted, %d channels open", chs, acc-s.accepted0, open)
		}
		c.Pass("ib_srp ch_count 2; daemon (srptarget stats): 2 logins accepted, 2 channels open")
	})
	l.Check(t, "attach kernel log", func(c *C) {
		s.needSession(c)
		if errs := KernelErrors(s.kmark); len(errs) > 0 {
			l.Printf("%s", strings.Join(errs, "\n"))
			c.Fatalf("%d line(s): %s", len(errs), Unstamped(errs[0]))
		}
		uas := len(Grep(KSince(s.kmark), powerOnUA))
		c.Pass("no Sense Key, failed, error, WARNING or BUG lines from login to scan (%d power-on unit attention(s) noted, one per LUN expected)", uas)
	})
}
