//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPR is SCSI-3 persistent reservations driven by sg_persist from two initiator ports of the
// Linux SRP initiator (make e2e-pr, integration/vm/pr.sh). Two add_target lines with different
// initiator_ext make two I_T nexuses to the same LUN, each its own SCSI host and disk (A, B):
//   - A registers and reserves WRITE EXCLUSIVE - REGISTRANTS ONLY; B, not registered, gets
//     RESERVATION CONFLICT for a write and may read;
//   - B registers and may write; READ FULL STATUS shows both with their SRP TransportIDs
//     (protocol 4h, the initiator port ids);
//   - A's PREEMPT AND ABORT removes B, which sees REGISTRATIONS PREEMPTED and then conflicts;
//   - with APTPL the key and reservation survive a restart of the daemon (a logout, SIGTERM, a
//     new daemon on the same state_dir, a new login), as the initiator and srptarget luns see;
//   - the sequence pacemaker's fence_scsi runs: unfence both (-o -I -S), reserve (-o -R -T 5),
//     fence B (-o -A -T 5), status (-i -k), unfence B.
//
// The groups are steps of one sequence; one selected alone by -run first brings the LUN's
// reservations to the state it starts from.
//
// Arguments (k=v): bin=/usr/local/bin/srptarget port=5555.
func TestPR(t *testing.T) {
	p := newPR(t)
	for _, step := range []func(*testing.T){p.setup, p.reserve, p.registerB, p.preempt, p.aptpl, p.fence, p.end} {
		step(t)
	}
}

// end: logout, SIGTERM, and no error in the daemons' logs.
func (p *pr) end(t *testing.T) {
	p.lab.Check(t, "daemon log", func(c *C) {
		if err := p.lab.Logout(); err != nil {
			c.Error(err)
		} else if err := p.d.WaitChannels(30 * time.Second); err != nil {
			c.Error(err)
		}
		if _, err := p.d.Stop(45 * time.Second); err != nil {
			c.Error(err)
		}
		var problems []string
		for _, d := range p.daemons {
			problems = append(problems, d.Problems()...)
		}
		if len(problems) > 0 {
			c.Fatalf("%s", problems[0])
		}
		c.Pass("no error lines")
	})
}

const (
	prConfig   = "/etc/srptarget-pr.yaml"
	prStateDir = "/var/lib/srptarget-pr"
	prSerial   = "5e2e00pr00"
	prIDExt    = "0002c90300a0b0c1"
	extA, extB = "0000000000000001", "0000000000000002"
	keyA, keyB = "0xa1", "0xb2"
)

// prState is where the LUN's reservations stand after a group.
type prState int

const (
	prUnknown     prState = iota
	prClean               // no registrations
	prAReserved           // A registered, holding WRITE EXCLUSIVE - REGISTRANTS ONLY
	prBRegistered         // and B registered
)

type pr struct {
	lab     *Lab
	bin     string
	port    int
	rxe     *RXE
	d       *Daemon
	daemons []*Daemon
	a, b    string // the disks of the two I_T nexuses
	state   prState
}

func newPR(t *testing.T) *pr {
	l := NewLab(t)
	return &pr{lab: l, bin: l.Arg("bin", "/usr/local/bin/srptarget"), port: l.ArgInt("port", 5555)}
}

func (p *pr) start() error {
	p.lab.Step("srptarget serve")
	d, err := p.lab.StartDaemon(p.bin, len(p.daemons)+1, "/tmp/srptarget-logs", "--config", prConfig)
	if err != nil {
		return err
	}
	p.d = d
	p.daemons = append(p.daemons, d)
	if !WaitFor(30*time.Second, func() bool { return d.Serving(p.port) }) {
		return fmt.Errorf("srptarget is not listening%s", d.Gone())
	}
	return nil
}

// loginOne logs in with initiator_ext ext and returns the new disk (/dev/sdX). ib_srp has no
// initiator_ext attribute, so the logins are made one at a time and the new disk is the one
// that was not there before.
func (p *pr) loginOne(ext string) (string, error) {
	before := SRPDisks()
	err := p.lab.Login(p.rxe, fmt.Sprintf("id_ext=%s,ioc_guid=%s,dest=%s:%d,initiator_ext=%s", prIDExt, prIDExt, p.rxe.IP4, p.port, ext))
	if err != nil {
		return "", err
	}
	var dev string
	WaitFor(60*time.Second, func() bool {
		for _, d := range SRPDisks() {
			if !slices.Contains(before, d) {
				dev = "/dev/" + d
				return true
			}
		}
		return false
	})
	if dev == "" {
		return "", fmt.Errorf("no new disk 60 s after the login with initiator_ext=%s", ext)
	}
	time.Sleep(time.Second)
	Quiet("sg_turs", dev) // the power-on unit attention
	return dev, nil
}

func (p *pr) setup(t *testing.T) {
	l := p.lab
	l.Step("soft-RoCE")
	l.Check(t, "daemon listening", func(c *C) {
		p.rxe = l.MustRXE(c)
		cfg := fmt.Sprintf("target:\n  id_ext: %q\nlisteners:\n  - address: %s\n    port: %d\nstate_dir: %s\n"+
			"luns:\n  - lun: 0\n    backstore: memory\n    size: 64MiB\n    serial: %q\nacls:\n  - initiators: [\"*\"]\n    luns: [0]\n",
			prIDExt, p.rxe.IP4, p.port, prStateDir, prSerial)
		if err := os.MkdirAll(prStateDir, 0o755); err != nil {
			c.Abort("%v", err)
		}
		if err := os.WriteFile(prConfig, []byte(cfg), 0o644); err != nil {
			c.Abort("%v", err)
		}
		l.Printf("%s", cfg)
		if err := p.start(); err != nil {
			c.Abort("%v", err)
		}
		c.Pass("pid %d", p.d.PID)
	})
	l.Step("two initiator ports")
	l.Check(t, "two I_T nexuses", func(c *C) {
		var err error
		if p.a, err = p.loginOne(extA); err != nil {
			c.Abort("login with initiator_ext=%s failed: %v", extA, err)
		}
		if p.b, err = p.loginOne(extB); err != nil {
			c.Abort("login with initiator_ext=%s failed: %v", extB, err)
		}
		l.Run("sg_persist", "-n", "-i", "-c", p.a)
		p.state = prClean
		c.Pass("initiator_ext %s: %s, %s: %s", extA, p.a, extB, p.b)
	})
}

// persist is a check that sg_persist -n ARGS... DEV exits 0.
func (p *pr) persist(c *C, dev string, args ...string) {
	o := p.lab.Run("sg_persist", append(append([]string{"-n"}, args...), dev)...)
	if !o.OK() {
		c.Fatalf("exit %d: sg_persist %s: %s", o.Code, strings.Join(args, " "), lastLine(o))
	}
	c.Pass("ok")
}

// keys are the registered keys READ KEYS lists, sorted.
func (p *pr) keys(dev string) string {
	var ks []string
	for _, line := range Quiet("sg_persist", "-n", "-i", "-k", dev).Lines() {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "0x") {
			ks = append(ks, f[0])
		}
	}
	slices.Sort(ks)
	return strings.Join(ks, " ")
}

// reservation is what READ RESERVATION says, on one line.
func (p *pr) reservation(dev string) string {
	return oneLine(Quiet("sg_persist", "-n", "-i", "-r", dev).Text)
}

// raw sends a CDB with sg_raw -v; "exit N: " and the status and sense lines (exit 0 for GOOD,
// 24 for RESERVATION CONFLICT).
func raw(args ...string) string {
	o := Quiet("sg_raw", append([]string{"-v"}, args...)...)
	var lines []string
	for _, line := range o.Lines() {
		if l := strings.ToLower(line); strings.Contains(l, "status") || strings.Contains(l, "sense") {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return fmt.Sprintf("exit %d: %s", o.Code, strings.Join(lines, " "))
}

// writeStatus and readStatus: WRITE(10) and READ(10) of one block at LBA 8.
func writeStatus(dev string) string {
	return raw("-s", "512", "-i", "/dev/zero", dev, "2a", "00", "00", "00", "00", "08", "00", "00", "01", "00")
}
func readStatus(dev string) string {
	return raw("-r", "512", dev, "28", "00", "00", "00", "00", "08", "00", "00", "01", "00")
}

func conflicts(out string) bool {
	return strings.HasPrefix(out, "exit 24:") || strings.Contains(strings.ToLower(out), "reservation conflict")
}
func good(out string) bool {
	return strings.HasPrefix(out, "exit 0:") && !strings.Contains(strings.ToLower(out), "conflict")
}

// wantWrite is a check that a write from dev conflicts (or succeeds).
func wantWrite(c *C, dev string, conflict bool) {
	out := writeStatus(dev)
	switch {
	case conflict && conflicts(out):
		c.Pass("RESERVATION CONFLICT: %s", out)
	case !conflict && good(out):
		c.Pass("%s", out)
	default:
		c.Fatalf("sg_raw WRITE(10): %s", out)
	}
}
