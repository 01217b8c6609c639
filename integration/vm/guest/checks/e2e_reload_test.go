//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var noUmadPort = regexp.MustCompile(`no InfiniBand port of the ib listeners has a umad device \([1-9][0-9]* umad ports on this host\)`)

// addLUN2 is the configuration with a 16 MiB memory LUN 2 that the ACL grants.
func addLUN2(cfg string) string {
	cfg = strings.Replace(cfg, "    luns: [0, 1]\n", "    luns: [0, 1, 2]\n", 1)
	return strings.Replace(cfg, "\nacls:\n", "  - lun: 2\n    backstore: memory\n    size: 16MiB\n\nacls:\n", 1)
}

// lun2Seen rescans the session's SCSI host and says whether it has LUN 2.
func (s *e2e) lun2Seen() bool {
	_ = os.WriteFile("/sys/class/scsi_host/"+s.host+"/scan", []byte("- - -"), 0o200)
	m, _ := filepath.Glob(fmt.Sprintf("/sys/class/scsi_device/%s:*:*:2", strings.TrimPrefix(s.host, "host")))
	return len(m) > 0
}

// reloadBack writes the configuration of the run back and reloads it.
func (s *e2e) reloadBack(c *C) {
	if err := s.writeConfig(nil); err != nil {
		c.Fatal(err)
	}
	r, code, err := s.d.Reload(false)
	if err != nil || code != 0 || !r.Applied {
		c.Fatalf("exit %d: %v %v", code, err, r.Errors)
	}
}

// reload: a dry run and a reload of the control socket that add LUN 2, then back.
func (s *e2e) reload(t *testing.T) {
	l := s.lab
	l.Group(t, "reload", "srptarget reload --dry-run, then reload: LUN 2 added", func(t *testing.T) {
		l.Check(t, "reload --dry-run", func(c *C) {
			s.needSession(c)
			if err := s.writeConfig(addLUN2); err != nil {
				c.Fatal(err)
			}
			r, code, err := s.d.Reload(true)
			if err != nil || code != 0 || !r.DryRun || r.Applied || !slices.Equal(r.LUNsAdded, []int{2}) {
				c.Fatalf("exit %d: %v; dry run %v, applied %v, LUNs added %v", code, err, r.DryRun, r.Applied, r.LUNsAdded)
			}
			if s.lun2Seen() {
				c.Fatalf("LUN 2 seen after a rescan: the dry run applied it")
			}
			c.Pass("LUNs added: %v, applied nothing: a rescan finds no LUN 2", r.LUNsAdded)
		})
		// The initiator gets REPORTED LUNS DATA HAS CHANGED; with no udev here, rescan by hand.
		l.Check(t, "reload applies", func(c *C) {
			s.needSession(c)
			if err := s.writeConfig(addLUN2); err != nil {
				c.Fatal(err)
			}
			r, code, err := s.d.Reload(false)
			if err != nil || code != 0 || !r.Applied {
				c.Fatalf("exit %d: %v %v", code, err, r.Errors)
			}
			if !WaitFor(15*time.Second, s.lun2Seen) {
				c.Fatalf("LUN 2 not seen 15 s after the reload (LUNs added: %v)", r.LUNsAdded)
			}
			c.Pass("exit 0, LUNs added %v; the initiator sees LUN 2", r.LUNsAdded)
		})
		// Back to the configuration the rest of the run expects, and the disk of LUN 2 removed.
		l.Check(t, "reload back", func(c *C) {
			s.needDaemon(c)
			s.reloadBack(c)
			m, _ := filepath.Glob(fmt.Sprintf("/sys/class/scsi_device/%s:*:*:2/device/delete", strings.TrimPrefix(s.host, "host")))
			for _, f := range m {
				_ = l.Write(f, "1")
			}
			c.Pass("LUN 2 retired, its disk deleted")
		})
	})
}

// ibListener: soft-RoCE has no InfiniBand port, so an ib listener (AF_IB) can never receive a
// login here. validate warns, login-line prints a placeholder for the GID, and a reload that
// adds one keeps serving the RDMA/CM listener while the ib listener waits, saying why.
func (s *e2e) ibListener(t *testing.T) {
	l := s.lab
	addIB := func(cfg string) string {
		return strings.Replace(cfg, "listeners:\n", fmt.Sprintf("listeners:\n  - kind: ib\n    port: %d\n", s.port), 1)
	}
	ibAddr := fmt.Sprintf("ib port %d", s.port)
	l.Group(t, "ib listener", "ib listener on soft-RoCE (no InfiniBand port)", func(t *testing.T) {
		l.Check(t, "validate: ib listener, no InfiniBand port", func(c *C) {
			s.needRXE(c)
			if err := s.writeConfig(addIB); err != nil {
				c.Fatal(err)
			}
			o := l.Run(s.bin, "validate", "--config", e2eConfig)
			want := "no InfiniBand port to bind: this host has " + s.rxe.Name + "/1 Ethernet"
			if !o.OK() || !strings.Contains(o.Text, want) {
				c.Fatalf("exit %d: %s", o.Code, o.Text)
			}
			c.Pass("%s", lineWith(o.Text, "no InfiniBand port"))
		})
		l.Check(t, "login-line: ib listener", func(c *C) {
			o := l.Run(s.bin, "login-line", "--config", e2eConfig)
			sid := fmt.Sprintf("00000000013f%04x", s.port)
			if !strings.Contains(o.Text, "dgid=<gid>,pkey=ffff,service_id="+sid+`"`) ||
				!strings.Contains(o.Text, "this host has no InfiniBand port") {
				c.Fatalf("%s", o.Text)
			}
			c.Pass("dgid=<gid>,pkey=ffff,service_id=%s with the reason", sid)
		})
		// The Device Management agent reads the umad devices (rxe0 has one) and finds no
		// InfiniBand port.
		l.Check(t, "dm-agent: no InfiniBand port", func(c *C) {
			l.Run("modprobe", "ib_umad")
			o := l.Run("timeout", "20", s.bin, "dm-agent", "--config", e2eConfig)
			if o.Code != 1 || !noUmadPort.MatchString(o.Text) {
				c.Fatalf("exit %d: %s", o.Code, o.Text)
			}
			c.Pass("%s", lastLine(o))
		})
		l.Check(t, "reload: ib listener waits", func(c *C) { s.checkIBWaits(c, ibAddr) })
		l.Check(t, "reload: ib listener removed", func(c *C) {
			s.needDaemon(c)
			s.reloadBack(c)
			st, err := s.d.Status()
			if err != nil {
				c.Fatal(err)
			}
			if len(st.Listeners) == 0 {
				c.Fatalf("status lists no listener at all")
			}
			for _, li := range st.Listeners {
				if strings.HasPrefix(li.Address, "ib ") || li.State != "listening" {
					c.Fatalf("status lists %s: %s", li.Address, li.State)
				}
			}
			c.Pass("status lists no ib listener (%d listener(s))", len(st.Listeners))
		})
	})
}

// checkIBWaits: a reload that adds an ib listener applies; the listener waits, as status and
// the log say (why: no InfiniBand port), and the RDMA/CM disks keep working.
func (s *e2e) checkIBWaits(c *C, ibAddr string) {
	s.needSession(c)
	mark := s.d.LogMark()
	t0 := Uptime()
	r, code, err := s.d.Reload(false)
	if err != nil || code != 0 || !r.Applied {
		c.Fatalf("reload exit %d: %v %v", code, err, r.Errors)
	}
	st, err := s.d.Status()
	if err != nil {
		c.Fatal(err)
	}
	state := ""
	for _, li := range st.Listeners {
		if li.Address == ibAddr {
			state = li.State
		}
	}
	why := ""
	for _, ln := range s.d.LogLines(MsgListenerWaits, mark) {
		if ln.Field("address") == ibAddr {
			why = ln.Field("error")
		}
	}
	if state != "waiting for an InfiniBand port" || !strings.Contains(why, "no InfiniBand port: "+s.rxe.Name+" port 1 is Ethernet") {
		c.Fatalf("status: %s %q; the log's reason: %q", ibAddr, state, why)
	}
	for _, d := range s.dev {
		if o := Quiet("dd", "if="+d, "of=/dev/null", "bs=4k", "count=1", "iflag=direct"); !o.OK() {
			c.Fatalf("reading %s after the reload: %s", d, o.Text)
		}
	}
	c.Pass("reload exit 0 after %s s; the ib listener waits (status: %s: %s); both disks read over RDMA/CM", Since(t0), ibAddr, state)
}

// lineWith is the first line of out that contains sub, at most 160 characters.
func lineWith(out, sub string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, sub) {
			return line[:min(len(line), 160)]
		}
	}
	return ""
}
