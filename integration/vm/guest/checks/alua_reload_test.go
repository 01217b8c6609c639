//go:build vmguest

package checks

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	// Linux logs the unit attention ASYMMETRIC ACCESS STATE CHANGED as "Asymmetric access
	// state changed" (scsi_report_sense), then scsi_dh_alua the state it read again.
	aascLine  = regexp.MustCompile(`Asymmetric access state changed`)
	aluaState = regexp.MustCompile(`alua: port group 0[12] state [A-Z]`)
	aluaNoise = regexp.MustCompile(`(?i)alua|multipath|device-mapper`)
)

// swap: a SIGHUP with group 1 standby and group 2 active/optimized moves the I/O to port B's
// path, and the standby path answers NOT READY.
func (a *alua) swap(t *testing.T) {
	l := a.lab
	l.Step("SIGHUP: group 1 standby, group 2 active/optimized")
	a.kmark = KMark()
	l.Check(t, "reload", func(c *C) {
		changed, err := a.sighup("standby", "active/optimized")
		if err != nil {
			c.Abort("the daemon did not apply the new states: %v", err)
		}
		if len(changed) != 2 {
			c.Fatalf("reload --dry-run: target port groups changed %v, want both", changed)
		}
		c.Pass("SIGHUP applied (srptarget stats reloads_applied); reload --dry-run before it: %s", strings.Join(changed, "; "))
	})
	if a.mpdev != "" {
		// The first command on each path gets ASYMMETRIC ACCESS STATE CHANGED; scsi_dh_alua
		// then asks REPORT TARGET PORT GROUPS again and the map moves to port B's path.
		l.Check(t, "I/O moved", func(c *C) {
			da, db := a.ios(2)
			l.Printf("%s", strings.Join(Grep(KSince(a.kmark), aluaNoise), "\n"))
			if db < 128 || da > 4 {
				c.Fatalf("%s +%d I/Os, %s +%d", a.db, db, a.da, da)
			}
			c.Pass("%s +%d I/Os, %s +%d", a.db, db, a.da, da)
		})
		l.Check(t, "multipath -ll after reload", func(c *C) {
			l.Run("multipath", "-ll")
			l.Run("multipath", "-r", "-v2")
			ll := l.Run("multipath", "-ll").Text
			if !InPathGroup(ll, 50, a.db) || !InPathGroup(ll, 1, a.da) {
				c.Fatalf("%s", oneLine(ll))
			}
			c.Pass("%s in the prio 50 group, %s in the prio 1 (standby) group", a.db, a.da)
		})
	}
	// (scsi_dh_alua updates every port group one REPORT TARGET PORT GROUPS describes, but logs
	// only some: group 2's new state shows in access_state and in multipath's priorities above.)
	l.Check(t, "ASYMMETRIC ACCESS STATE CHANGED seen", func(c *C) {
		since := KSince(a.kmark)
		ua := len(Grep(since, aascLine))
		var states []string
		for _, line := range since {
			if m := aluaState.FindString(line); m != "" && !slices.Contains(states, m) {
				states = append(states, m)
			}
		}
		slices.Sort(states)
		got := strings.Join(states, " ")
		if ua < 2 || !strings.Contains(got, "01 state S") {
			c.Fatalf("%d unit attentions logged; %s", ua, got)
		}
		c.Pass("kernel: %d unit attentions, then %s", ua, got)
	})
	for _, d := range []string{a.da, a.db} {
		l.Printf("SRPTVM: /dev/%s: access_state %s", d, readTrim("/sys/block/"+d+"/device/access_state"))
	}
	l.Step("the standby path answers NOT READY")
	l.Check(t, "standby: NOT READY 04h/0Bh", func(c *C) {
		l.Run("sg_rtpg", "-d", "-e", "/dev/"+a.da)
		// sg_turs -v prints the sense; it is enough to see the state
		a.wantSense(c, "/dev/"+a.da, "standby")
	})
	l.Check(t, "active path: TEST UNIT READY", func(c *C) {
		if o := l.Run("sg_turs", "-v", "/dev/"+a.db); !o.OK() {
			c.Fatalf("on %s: exit %d: %s", a.db, o.Code, oneLine(o.Text))
		}
		c.Pass("GOOD on %s", a.db)
	})
}

// wantSense passes when sg_turs on dev reports sense that names the state.
func (a *alua) wantSense(c *C, dev, state string) {
	for range 2 { // the first may report the unit attention of the change
		o := a.lab.Run("sg_turs", "-v", dev)
		for _, line := range o.Lines() {
			if strings.Contains(strings.ToLower(line), state) {
				c.Pass("%s", strings.TrimSpace(line))
				return
			}
		}
	}
	c.Fatalf("sg_turs %s: no sense naming the %s state", dev, state)
}

// unavailable: a SIGHUP with group 1 unavailable.
func (a *alua) unavailable(t *testing.T) {
	l := a.lab
	l.Step("SIGHUP: group 1 unavailable")
	l.Check(t, "unavailable: NOT READY 04h/0Ch", func(c *C) {
		if _, err := a.sighup("unavailable", "active/optimized"); err != nil {
			c.Abort("the daemon did not apply the new states: %v", err)
		}
		a.wantSense(c, "/dev/"+a.da, "unavailable")
	})
	l.Run("sg_rtpg", "-d", "/dev/"+a.db)
}

// stop: the map flushed, logout, SIGTERM, the kernel log.
func (a *alua) stop(t *testing.T) {
	l := a.lab
	l.Step("logout, stop")
	if a.mpdev != "" {
		l.Run("multipath", "-F")
	}
	l.Check(t, "srptarget stop", func(c *C) {
		if err := l.Logout(); err != nil {
			c.Errorf("logout: %v", err)
		} else if err := a.d.WaitChannels(30 * time.Second); err != nil {
			c.Error(err)
		}
		code, err := a.d.Stop(45 * time.Second)
		if err != nil || code != 0 {
			c.Fatalf("exit %d: %v", code, err)
		}
		c.Pass("exit 0")
	})
	l.Check(t, "kernel log", func(c *C) { c.CheckKernelLog() })
}
