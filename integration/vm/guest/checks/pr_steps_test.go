//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// need brings the reservations to st when the groups before did not leave them there (a group
// selected alone by -run): A registers, ignoring any key it had, and clears everything, then
// the state is built up again.
func (p *pr) need(c *C, st prState) {
	if p.state == st && st != prUnknown {
		return
	}
	if p.a == "" || p.b == "" {
		c.Abort("no two I_T nexuses (run the whole TestPR)")
	}
	steps := [][]string{{p.a, "-o", "-I", "-S", keyA}, {p.a, "-o", "-C", "-K", keyA}}
	if st >= prAReserved {
		steps = append(steps, []string{p.a, "-o", "-G", "-S", keyA}, []string{p.a, "-o", "-R", "-K", keyA, "-T", "5"})
	}
	if st >= prBRegistered {
		steps = append(steps, []string{p.b, "-o", "-G", "-S", keyB})
	}
	for _, s := range steps {
		if o := p.lab.Run("sg_persist", append(append([]string{"-n"}, s[1:]...), s[0])...); !o.OK() {
			c.Fatalf("bringing the reservations to the group's start: sg_persist %s: exit %d", strings.Join(s[1:], " "), o.Code)
		}
	}
	Quiet("sg_turs", p.b) // the unit attention the clearing left for B
	p.state = st
}

func (p *pr) reserve(t *testing.T) {
	l := p.lab
	l.Group(t, "reserve", "register A, reserve WRITE EXCLUSIVE - REGISTRANTS ONLY", func(t *testing.T) {
		l.Check(t, "A registers", func(c *C) {
			p.need(c, prClean)
			p.persist(c, p.a, "-o", "-G", "-S", keyA)
		})
		l.Check(t, "A reserves type 5", func(c *C) { p.persist(c, p.a, "-o", "-R", "-K", keyA, "-T", "5"); p.state = prAReserved })
		l.Check(t, "keys (READ KEYS from B)", func(c *C) { c.Equal(keyA, p.keys(p.b)) })
		l.Check(t, "unregistered B write conflicts", func(c *C) { wantWrite(c, p.b, true) })
		l.Check(t, "unregistered B may read", func(c *C) {
			if out := readStatus(p.b); !good(out) {
				c.Fatalf("sg_raw READ(10): %s", out)
			} else {
				c.Pass("%s", out)
			}
		})
	})
}

func (p *pr) registerB(t *testing.T) {
	l := p.lab
	l.Group(t, "register B", "register B", func(t *testing.T) {
		l.Check(t, "B registers", func(c *C) {
			p.need(c, prAReserved)
			p.persist(c, p.b, "-o", "-G", "-S", keyB)
			p.state = prBRegistered
		})
		l.Check(t, "registered B writes", func(c *C) { wantWrite(c, p.b, false) })
		// sg_persist names protocol 4h's TransportID "RDMA initiator port identifier" and dumps
		// its 16 bytes on the next line: initiator_ext first.
		l.Check(t, "READ FULL STATUS: SRP TransportIDs", func(c *C) {
			lines := l.Run("sg_persist", "-n", "-i", "-s", p.a).Lines()
			n, exts := 0, map[string]bool{}
			for i, line := range lines {
				if strings.Contains(strings.ToLower(line), "rdma initiator port identifier") && i+1 < len(lines) {
					n++
					for _, e := range []string{"01", "02"} {
						if strings.Contains(lines[i+1], "00 00 00 00 00 00 00 "+e) {
							exts[e] = true
						}
					}
				}
			}
			if n != 2 || len(exts) != 2 {
				c.Fatalf("%d SRP TransportID lines, %d initiator_ext seen: %s", n, len(exts), oneLine(strings.Join(lines, " ")))
			}
			c.Pass("%d SRP TransportIDs, initiator_ext 1 and 2", n)
		})
	})
}

func (p *pr) preempt(t *testing.T) {
	l := p.lab
	l.Group(t, "preempt", "A preempts and aborts B", func(t *testing.T) {
		l.Check(t, "A PREEMPT AND ABORT", func(c *C) {
			p.need(c, prBRegistered)
			p.persist(c, p.a, "-o", "-A", "-K", keyA, "-S", keyB, "-T", "5")
			p.state = prAReserved
		})
		l.Check(t, "B sees REGISTRATIONS PREEMPTED", func(c *C) {
			out := raw(p.b, "00", "00", "00", "00", "00", "00")
			if !strings.Contains(strings.ToLower(out), "registrations preempted") {
				c.Fatalf("TEST UNIT READY: %s", out)
			}
			c.Pass("%s", out)
		})
		l.Check(t, "preempted B write conflicts", func(c *C) { wantWrite(c, p.b, true) })
		l.Check(t, "keys after preempt", func(c *C) { c.Equal(keyA, p.keys(p.a)) })
	})
}

// aptpl: with APTPL the key and the reservation survive a logout and a restart of the daemon
// on the same state_dir.
func (p *pr) aptpl(t *testing.T) {
	l := p.lab
	var resBefore string
	l.Group(t, "APTPL", "APTPL across a daemon restart", func(t *testing.T) {
		l.Check(t, "A registers with APTPL", func(c *C) {
			p.need(c, prAReserved)
			p.persist(c, p.a, "-o", "-G", "-K", keyA, "-S", keyA, "-Z")
			resBefore = p.reservation(p.a)
		})
		l.Check(t, "state file written", func(c *C) {
			f := fmt.Sprintf("%s/pr-%s.json", prStateDir, prSerial)
			b, err := os.ReadFile(f)
			if err != nil || len(b) == 0 {
				c.Fatalf("no %s: %v", f, err)
			}
			c.Pass("%s: %s", f, oneLine(string(b))[:min(200, len(oneLine(string(b))))])
		})
		l.Check(t, "logout", func(c *C) {
			if err := l.Logout(); err != nil {
				c.Fatal(err)
			}
			if err := p.d.WaitChannels(30 * time.Second); err != nil {
				c.Fatal(err)
			}
			c.Pass("both disks removed, the daemon's channels closed")
		})
		l.Check(t, "daemon stopped", func(c *C) {
			code, err := p.d.Stop(45 * time.Second)
			if err != nil || code != 0 {
				c.Fatalf("exit status %d: %v", code, err)
			}
			c.Pass("SIGTERM, exit 0")
		})
		if err := p.start(); err != nil {
			l.Check(t, "daemon restarted", func(c *C) { c.Abort("%v", err) })
		}
		// The daemon's own view, before any initiator logs in again: the state file restored.
		l.Check(t, "daemon restored the state", func(c *C) {
			luns, err := p.d.LUNs()
			if err != nil {
				c.Fatal(err)
			}
			if len(luns) != 1 || luns[0].Reservations == nil {
				c.Fatalf("srptarget luns: %+v", luns)
			}
			r := luns[0].Reservations
			var keys []string
			for _, reg := range r.Registrations {
				keys = append(keys, reg.Key)
			}
			if r.Type != 5 || len(r.Registrations) != 1 || r.Registrations[0].Key != keyA || !r.Registrations[0].Holder {
				c.Fatalf("srptarget luns: reservation type %d, keys %v", r.Type, keys)
			}
			c.Pass("srptarget luns: key %s of %s holds type 5, generation %d", keyA, r.Registrations[0].Initiator, r.Generation)
		})
		l.Check(t, "keys after restart", func(c *C) {
			var err error
			if p.a, err = p.loginOne(extA); err != nil {
				c.Abort("login after restart failed: %v", err)
			}
			c.Equal(keyA, p.keys(p.a))
		})
		l.Check(t, "reservation after restart", func(c *C) { c.Equal(resBefore, p.reservation(p.a)) })
		var err error
		if p.b, err = p.loginOne(extB); err != nil {
			l.Check(t, "login B after restart", func(c *C) { c.Abort("%v", err) })
		}
	})
}

// fence is the sequence pacemaker's fence_scsi runs.
func (p *pr) fence(t *testing.T) {
	l := p.lab
	l.Group(t, "fence_scsi", "fence_scsi's sequence", func(t *testing.T) {
		l.Check(t, "clear", func(c *C) { p.need(c, prAReserved); p.persist(c, p.a, "-o", "-C", "-K", keyA) })
		l.Check(t, "unfence A (-o -I -S)", func(c *C) { p.persist(c, p.a, "-o", "-I", "-S", keyA) })
		l.Check(t, "unfence B (-o -I -S)", func(c *C) { p.persist(c, p.b, "-o", "-I", "-S", keyB) })
		l.Check(t, "reserve (-o -R -T 5)", func(c *C) { p.persist(c, p.a, "-o", "-R", "-K", keyA, "-T", "5") })
		l.Check(t, "status (-i -k)", func(c *C) { c.Equal(keyA+" "+keyB, p.keys(p.a)) })
		l.Check(t, "fence B (-o -A -T 5)", func(c *C) { p.persist(c, p.a, "-o", "-A", "-K", keyA, "-S", keyB, "-T", "5") })
		l.Check(t, "status after fencing (-i -k)", func(c *C) { c.Equal(keyA, p.keys(p.a)) })
		l.Check(t, "fenced B cannot write", func(c *C) { Quiet("sg_turs", p.b); wantWrite(c, p.b, true) })
		l.Check(t, "unfence B again", func(c *C) { p.persist(c, p.b, "-o", "-I", "-S", keyB) })
		l.Check(t, "unfenced B writes", func(c *C) { wantWrite(c, p.b, false) })
		l.Check(t, "final keys", func(c *C) { c.Equal(keyA+" "+keyB, p.keys(p.a)) })
		p.state = prUnknown
	})
}
