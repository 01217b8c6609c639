//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestALUA is ALUA end to end (make e2e-alua, integration/vm/alua.sh): the daemon serves one
// LUN through two target ports (target.id_ext and target.ports[0]), each in its own target
// port group, plus a remote port of a second daemon that does not exist; ib_srp logs in to
// both; sg_inq, sg_vpd and sg_rtpg show the groups; dm-multipath (without udev or multipathd)
// makes one map with the ALUA handler and priorities; a SIGHUP reload that swaps the groups'
// states moves the I/O from one path to the other (per-path I/O counts from
// /sys/block/sdX/stat), the standby path answers NOT READY 04h/0Bh, a reload to unavailable
// 04h/0Ch. multipathd does not run (it needs udev): the kernel's scsi_dh_alua, told by the unit
// attention ASYMMETRIC ACCESS STATE CHANGED, reads the groups again and fails I/O on the
// standby path, and dm-multipath switches path group by itself. The checks are one sequence.
//
// Arguments (k=v): bin=/usr/local/bin/srptarget.
func TestALUA(t *testing.T) {
	l := NewLab(t)
	a := &alua{lab: l, bin: l.Arg("bin", "/usr/local/bin/srptarget")}
	for _, step := range []func(*testing.T){a.setup, a.paths, a.multipath, a.swap, a.unavailable, a.stop} {
		step(t)
	}
}

const (
	aluaConfig = "/etc/srptarget-alua.yaml"
	aluaPort   = 5555
	aluaIDA    = "5e2e00000000a001" // target.id_ext, relative port 1, group 1
	aluaIDB    = "5e2e00000000a002" // target.ports[0].id_ext, relative port 2, group 2
	// Relative port 3 is in group 2 too: another daemon's port, described but not served.
)

type alua struct {
	lab    *Lab
	bin    string
	rxe    *RXE
	d      *Daemon
	da, db string // the disks through port A and port B
	mpdev  string // the multipath map's /dev/mapper/NAME, "" without one
	kmark  int
}

// writeConfig writes the configuration with those group states.
func (a *alua) writeConfig(state1, state2 string) error {
	cfg := fmt.Sprintf(`target:
  id_ext: "%s"
  relative_port_id: 1
  ports:
    - id_ext: "%s"
      relative_port_id: 2
listeners:
  - address: %s
    port: %d
luns:
  - lun: 0
    backstore: memory
    size: 64MiB
    serial: "a1ua0000"
acls:
  - initiators: ["*"]
    luns: [0]
alua:
  groups:
    - {id: 1, state: %s, ports: [1]}
    - {id: 2, state: %s, ports: [2, 3]}
`, aluaIDA, aluaIDB, a.rxe.IP4, aluaPort, state1, state2)
	return os.WriteFile(aluaConfig, []byte(cfg), 0o600)
}

func (a *alua) setup(t *testing.T) {
	l := a.lab
	l.Step("soft-RoCE, modules")
	l.Check(t, "modules", func(c *C) {
		a.rxe = l.MustRXE(c)
		// The ALUA device handler must be loaded before the disks appear: the SCSI midlayer
		// attaches it at scan time to devices whose INQUIRY says TPGS != 0.
		for _, m := range []string{"scsi_dh_alua", "dm_mod", "dm_multipath", "dm_round_robin", "dm_service_time", "dm_queue_length"} {
			if o := l.Run("modprobe", m); !o.OK() {
				c.Abort("modprobe %s: %s", m, o.Text)
			}
		}
		c.Pass("scsi_dh_alua, dm_multipath")
	})
	l.Step("srptarget with two target ports")
	l.Check(t, "srptarget listening", func(c *C) {
		if err := a.writeConfig("active/optimized", "active/non-optimized"); err != nil {
			c.Abort("%v", err)
		}
		if o := l.Run(a.bin, "validate", "--config", aluaConfig); !o.OK() {
			c.Abort("configuration refused: %s", o.Text)
		}
		var err error
		if a.d, err = l.StartDaemon(a.bin, 1, "/tmp/srptarget-logs", "--config", aluaConfig); err != nil {
			c.Abort("%v", err)
		}
		if !WaitFor(30*time.Second, func() bool { return a.d.Serving(aluaPort) }) {
			c.Abort("srptarget does not listen on %d%s", aluaPort, a.d.Gone())
		}
		c.Pass("port %d, target ports %s (relative 1) and %s (relative 2)", aluaPort, aluaIDA, aluaIDB)
	})
}

var relTPG = regexp.MustCompile(`(?s)Relative target port: (\S+).*Target port group: (\S+)`)

// paths: a login through each target port, and what each path says of its port and group.
func (a *alua) paths(t *testing.T) {
	l := a.lab
	l.Step("two logins")
	l.Check(t, "two paths", func(c *C) {
		for _, id := range []string{aluaIDA, aluaIDB} {
			if err := l.Login(a.rxe, fmt.Sprintf("id_ext=%s,ioc_guid=%s,dest=%s:%d", id, aluaIDA, a.rxe.IP4, aluaPort)); err != nil {
				c.Abort("add_target port %s: %v", id, err)
			}
		}
		if !WaitFor(60*time.Second, func() bool { a.da, a.db = DiskOf(aluaIDA), DiskOf(aluaIDB); return a.da != "" && a.db != "" }) {
			c.Abort("want a disk through each target port, have: %s", strings.Join(SRPDisks(), " "))
		}
		c.Pass("port A /dev/%s, port B /dev/%s", a.da, a.db)
	})
	l.Step("sg_inq, sg_vpd -p di, sg_rtpg -d -e")
	l.Check(t, "sg_inq TPGS", func(c *C) {
		for _, d := range []string{a.da, a.db} {
			if got := Flags(l.Run("sg_inq", "/dev/"+d).Text, "TPGS"); got != "TPGS=1" {
				c.Fatalf("/dev/%s: %s", d, got)
			}
		}
		c.Pass("TPGS=1 (implicit ALUA) on both paths")
	})
	l.Check(t, "VPD 0x83 port designators", func(c *C) {
		var got []string
		for _, d := range []string{a.da, a.db} {
			m := relTPG.FindStringSubmatch(l.Run("sg_vpd", "-p", "di", "/dev/"+d).Text)
			if m == nil {
				c.Fatalf("/dev/%s: no relative target port or target port group", d)
			}
			got = append(got, m[1]+"/"+m[2])
		}
		c.Equal("A 0x1/0x1, B 0x2/0x2", "A "+got[0]+", B "+got[1])
	})
	l.Check(t, "sg_rtpg -d -e", func(c *C) {
		out := l.Run("sg_rtpg", "-d", "-e", "/dev/"+a.db).Text
		l.Run("sg_rtpg", "-e", "-H", "/dev/"+a.db)
		g := ParseRTPG(out)
		if g["0x1"].State != "active/optimized" || g["0x2"].State != "active/non optimized" ||
			strings.Join(g["0x2"].Ports, " ") != "0x02 0x03" {
			c.Fatalf("%+v: %s", g, oneLine(out))
		}
		c.Pass("group 1 active/optimized (port 1), group 2 active/non-optimized (ports 2, 3: 3 is remote)")
	})
	l.Check(t, "scsi_dh_alua attached", func(c *C) {
		c.Equal("alua alua", readTrim("/sys/block/"+a.da+"/device/dh_state")+" "+readTrim("/sys/block/"+a.db+"/device/dh_state"))
	})
}

// multipath: one map over both paths, with the ALUA handler, the I/O on the optimized one.
func (a *alua) multipath(t *testing.T) {
	l := a.lab
	l.Step("multipath")
	l.Check(t, "multipath -ll", func(c *C) {
		ll, name, err := l.Multipath(a.da, a.db)
		if err != nil {
			c.Fatal(err)
		}
		dev := "/dev/mapper/" + name
		if fi, err := os.Stat(dev); name == "" || err != nil || fi.Mode()&os.ModeDevice == 0 ||
			!strings.Contains(ll, "hwhandler='1 alua'") || !InPathGroup(ll, 50, a.da) || !InPathGroup(ll, 10, a.db) {
			l.Run("multipath", "-v4")
			c.Fatalf("%s", oneLine(ll))
		}
		a.mpdev = dev
		c.Pass("%s: hwhandler '1 alua', path groups prio 50 (%s) and 10 (%s)", name, a.da, a.db)
	})
	if a.mpdev == "" {
		return
	}
	l.Step("I/O through the map: on the active/optimized path")
	l.Check(t, "I/O on the optimized path", func(c *C) {
		da, db := a.ios(1)
		if da < 64 || db != 0 {
			c.Fatalf("%s +%d I/Os, %s +%d", a.da, da, a.db, db)
		}
		c.Pass("%s +%d I/Os, %s +%d", a.da, da, a.db, db)
	})
}

// ios reads 4 MiB from the map n times and returns what each path completed meanwhile.
func (a *alua) ios(n int) (da, db int64) {
	a0, b0 := DiskIOs(a.da), DiskIOs(a.db)
	for range n {
		a.lab.Run("dd", "if="+a.mpdev, "of=/dev/null", "bs=64k", "count=64", "iflag=direct")
	}
	return DiskIOs(a.da) - a0, DiskIOs(a.db) - b0
}

// sighup rewrites the configuration, asks the daemon what a reload would change (a dry run of
// the control socket), sends SIGHUP and waits for srptarget stats to count the reload.
func (a *alua) sighup(state1, state2 string) (changed []string, err error) {
	if err := a.writeConfig(state1, state2); err != nil {
		return nil, err
	}
	var dry struct {
		Changed []string `json:"port_groups_changed"`
	}
	if code, err := a.d.Ask(&dry, "reload", "--dry-run"); err != nil || code != 0 {
		return nil, fmt.Errorf("reload --dry-run: exit %d: %v", code, err)
	}
	n0, err := a.d.Stat("reloads_applied")
	if err != nil {
		return nil, err
	}
	a.lab.Printf("SRPTVM$ kill -HUP %d", a.d.PID)
	if err := a.d.Signal(syscall.SIGHUP); err != nil {
		return dry.Changed, err
	}
	if !WaitFor(10*time.Second, func() bool { n, err := a.d.Stat("reloads_applied"); return err == nil && n > n0 }) {
		return dry.Changed, fmt.Errorf("srptarget stats counts no reload 10 s after SIGHUP%s", a.d.Gone())
	}
	return dry.Changed, nil
}
