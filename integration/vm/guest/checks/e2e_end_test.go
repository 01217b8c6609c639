//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

var loginRejected = regexp.MustCompile(`(?i)REJECTED|SRP_LOGIN_REJ|reject`)

// aclRefusal: a login with an initiator_ext the ACL does not admit is refused; the kernel logs
// the SRP_LOGIN_REJ, the daemon counts it and logs the initiator and the ACL that would let it
// in, and keeps running.
func (s *e2e) aclRefusal(t *testing.T) {
	l := s.lab
	l.Group(t, "ACL refusal", fmt.Sprintf("login with initiator_ext=%s (not in the ACL)", badInitExt), func(t *testing.T) {
		var kmark, dmark int
		var rejected0 int64
		l.Check(t, "ACL refusal: initiator", func(c *C) {
			s.needDaemon(c)
			kmark, dmark = KMark(), s.d.LogMark()
			var err error
			if rejected0, err = s.d.Stat("logins_rejected"); err != nil {
				c.Fatal(err)
			}
			err = l.Login(s.rxe, s.needLoginOpts(c)+",initiator_ext="+badInitExt)
			if err == nil {
				_ = l.Logout()
				c.Fatalf("add_target succeeded")
			}
			time.Sleep(500 * time.Millisecond)
			since := KSince(kmark)
			l.Printf("%s", strings.Join(since, "\n"))
			k := Grep(since, loginRejected)
			if len(k) == 0 || len(SRPDisks()) > 0 {
				c.Fatalf("add_target failed (%v) but no reject in the kernel log", err)
			}
			c.Pass("add_target failed (%v); kernel: %s", unwrapPath(err), Unstamped(k[0]))
		})
		l.Check(t, "ACL refusal: counted", func(c *C) {
			n, err := s.d.Stat("logins_rejected")
			if err != nil {
				c.Fatal(err)
			}
			if n-rejected0 < 1 {
				c.Fatalf("srptarget stats: logins_rejected %d, %d before the login", n, rejected0)
			}
			c.Pass("srptarget stats: logins_rejected +%d", n-rejected0)
		})
		l.Check(t, "ACL refusal: daemon log", func(c *C) {
			wantID := "0x" + badInitExt + s.needRXE(c).GUID
			lines := s.d.LogLines(MsgLoginRejected, dmark)
			if len(lines) == 0 {
				c.Fatalf("no %q line", MsgLoginRejected)
			}
			ln := lines[0]
			acl := fmt.Sprintf(`{initiators: [%q], luns: [0, 1]}`, wantID)
			if ln.Field("initiator") != wantID || !strings.Contains(ln.Field("detail"), acl) {
				c.Fatalf("want the initiator %s and the ACL %s: %s", wantID, acl, ln.Raw)
			}
			c.Pass("reason %s; names %s and the ACL to add", ln.Field("reason"), wantID)
		})
		l.Check(t, "daemon after refusal", func(c *C) {
			if !s.d.Alive() {
				c.Fatalf("exited%s", s.d.Gone())
			}
			c.Pass("running")
		})
	})
}

// unwrapPath is an error of a file write without the path (add_target's error is the
// target's answer).
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// ipv6: a login to the target's IPv6 address; the daemon's session comes from it.
func (s *e2e) ipv6(t *testing.T) {
	l := s.lab
	if l.Arg("ipv6_login", "1") != "1" {
		return
	}
	l.Group(t, "ipv6", "ib_srp login over IPv6", func(t *testing.T) {
		if !l.Check(t, "srp login ipv6", func(c *C) {
			s.needDaemon(c)
			saved := s.needLoginOpts(c)
			s.loginOpts = strings.Replace(saved, fmt.Sprintf("dest=%s:", s.rxe.IP4), fmt.Sprintf("dest=[%s]:", s.rxe.IP6), 1)
			defer func() { s.loginOpts = saved }()
			s.checkLogin(c, "ch_count=2")
		}) {
			return
		}
		l.Check(t, "TEST UNIT READY ipv6", s.tur)
		l.Check(t, "ipv6 session source", func(c *C) {
			ss, err := s.d.Sessions()
			if err != nil {
				c.Fatal(err)
			}
			var srcs []string
			for _, x := range ss {
				for _, ch := range x.Channels {
					srcs = append(srcs, ch.Source)
				}
			}
			want := "[" + s.needRXE(c).IP6 + "]:"
			if len(srcs) == 0 {
				c.Fatalf("srptarget sessions lists no channel")
			}
			for _, src := range srcs {
				if !strings.HasPrefix(src, want) {
					c.Fatalf("channel sources %v, want %s...", srcs, want)
				}
			}
			c.Pass("srptarget sessions: channels from %v", srcs)
		})
		l.Check(t, "srp logout ipv6", s.logout)
	})
}

// shutdown: SIGTERM with no initiator attached, the RDMA/CM port released, the kernel log
// clean.
func (s *e2e) shutdown(t *testing.T) {
	l := s.lab
	l.Step("srptarget shutdown (SIGTERM)")
	l.Check(t, "srptarget SIGTERM", func(c *C) { s.needDaemon(c); s.stop(c) })
	l.Check(t, "RDMA/CM port released", func(c *C) {
		if CMListening(s.port) {
			c.Fatalf("port %d still listening", s.port)
		}
		c.Pass("port %d", s.port)
	})
	if fi, err := os.Stat(e2eLUNs[1].path); err == nil {
		l.Printf("%s at the end: %d bytes, %d allocated", e2eLUNs[1].path, fi.Size(), allocated(e2eLUNs[1].path))
	}
	l.Step("kernel log")
	l.Check(t, "kernel log", func(c *C) { c.CheckKernelLog() })
}
