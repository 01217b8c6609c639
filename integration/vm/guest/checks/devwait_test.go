//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDevWait is the boot order (integration/vm/devwait.sh): srptarget serve, with its default
// --config, starts before any RDMA module is loaded (no rdma_rxe, ib_uverbs or rdma_ucm: as when
// systemd starts it before the adapter's driver), says so in srptarget status, and listens
// without being told once soft-RoCE has made rxe0 and its address; ib_srp then logs in, and
// SIGTERM stops it with status 0. Then, each group a daemon instance of its own:
//   - address: configured for an address rxe0's netdev does not have, it waits without
//     retrying until `ip addr add` gives it the address, then listens;
//   - SIGTERM: stopped promptly while it waits;
//   - late start: its start fails when the device appears (a LUN's directory removed after
//     the first stage); it stays up, says why (the only account is its log: the lines are
//     pinned by integration/logpins_test.go), status exits 4, and `srptarget reload` starts it
//     once the directory is back.
//
// The first group needs a fresh guest (no RDMA module loaded); the others make soft-RoCE when
// it is not there, so that -run can select them alone.
//
// Arguments (k=v): bin=/usr/local/bin/srptarget port=5555.
func TestDevWait(t *testing.T) {
	w := &devWait{port: 5555}
	l := NewLab(t)
	w.lab, w.bin, w.port = l, l.Arg("bin", "/usr/local/bin/srptarget"), l.ArgInt("port", 5555)
	l.Group(t, "device", "srptarget serve before any RDMA module", w.device)
	l.Group(t, "address", "an instance for an address rxe0's netdev does not have", w.address)
	l.Group(t, "SIGTERM", "SIGTERM ends the wait", w.sigterm)
	l.Group(t, "late start", "the start fails when the device appears; a reload starts it", w.lateStart)
}

const (
	devWaitConfig  = "/etc/srptarget/srptarget.yaml" // serve's default --config
	devWaitLUNDir  = "/srv/devwait/luns"
	devWaitLogs    = "/var/log/srptarget-devwait"
	devWaitIP      = "169.254.50.1" // the address SetupRXE gives rxe0's netdev
	devWaitOtherIP = "169.254.77.7"
	devWaitNeverIP = "169.254.88.8"
)

type devWait struct {
	lab      *Lab
	bin      string
	port     int
	rxe      *RXE
	instance int
}

// config writes serve's default configuration: a listener on ip and memory LUN 0, with file
// LUN 1 in devWaitLUNDir when file is set. No target identity: it comes from rxe0's node GUID,
// so the first stage cannot run before a device is there.
func (w *devWait) config(ip string, file bool) error {
	luns, acl := "  - lun: 0\n    backstore: memory\n    size: 64MiB\n", "[0]"
	if file {
		luns += "  - lun: 1\n    backstore: file\n    path: " + devWaitLUNDir + "/lun1.img\n    size: 16MiB\n    create: true\n"
		acl = "[0, 1]"
	}
	text := fmt.Sprintf("listeners:\n  - address: %s\n    port: %d\nluns:\n%sacls:\n  - initiators: [\"*\"]\n    luns: %s\n",
		ip, w.port, luns, acl)
	if err := os.MkdirAll("/etc/srptarget", 0o755); err != nil {
		return err
	}
	return os.WriteFile(devWaitConfig, []byte(text), 0o644)
}

// start writes the default configuration (config's, with a listener on ip and file LUN 1 with
// file) and starts the next instance with it and the default control socket.
func (w *devWait) start(c *C, ip string, file bool) *Daemon {
	if err := w.config(ip, file); err != nil {
		c.Abort("%v", err)
	}
	w.instance++
	d, err := w.lab.StartDaemon(w.bin, w.instance, devWaitLogs)
	if err != nil {
		c.Abort("srptarget serve: %v", err)
	}
	return d
}

// waitState waits up to 10 s for srptarget status to say the daemon waits for a device, and for
// its listener on ip to wait for its address; the status, or why not.
func (w *devWait) waitState(d *Daemon, ip string) (Status, error) {
	var st Status
	var err error
	addr := fmt.Sprintf("%s:%d", ip, w.port)
	ok := WaitFor(10*time.Second, func() bool {
		st, err = d.Status()
		return err == nil && st.State == StateWaitingDevice && slices.Contains(st.Listeners, Listener{addr, ListenerWaitingAddress})
	})
	if ok {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("srptarget status: %v%s", err, d.Gone())
	}
	return st, fmt.Errorf("srptarget status 10 s after the start: state %q, listeners %+v%s", st.State, st.Listeners, d.Gone())
}

// listens waits up to d for the daemon to listen on its port and srptarget status to say it
// serves; the row's detail, or why not.
func (w *devWait) listens(dm *Daemon, d time.Duration, t0 time.Duration) (string, error) {
	var st Status
	var err error
	if WaitFor(d, func() bool {
		if !dm.Listening(w.port) {
			return false
		}
		st, err = dm.Status()
		return err == nil && st.State == "serving"
	}) {
		return fmt.Sprintf("RDMA/CM port %d %s s later; srptarget status: %s", w.port, Since(t0), st.State), nil
	}
	w.lab.Run("rdma", "resource", "show", "cm_id")
	return "", fmt.Errorf("not listening on RDMA/CM port %d %v later (status %q, %v)%s", w.port, d, st.State, err, dm.Gone())
}

// needRXE is rxe0, made when it is not there.
func (w *devWait) needRXE(c *C) *RXE {
	if w.rxe == nil {
		w.rxe = w.lab.MustRXE(c)
	}
	return w.rxe
}

// login logs in and waits for n disks; the row's detail.
func (w *devWait) login(c *C, n int) {
	r := w.needRXE(c)
	if err := w.lab.Login(r, fmt.Sprintf("id_ext=%s,ioc_guid=%s,dest=%s:%d", r.GUID, r.GUID, r.IP4, w.port)); err != nil {
		c.Fatalf("add_target: %v", err)
	}
	if !WaitFor(20*time.Second, func() bool { return len(SRPDisks()) == n }) {
		c.Fatalf("want %d disks 20 s after add_target, have: %s", n, strings.Join(SRPDisks(), " "))
	}
	c.Pass("disks %s", strings.Join(SRPDisks(), " "))
}

// stop is the check that SIGTERM ends the daemon with exit status 0.
func (w *devWait) stop(t *testing.T, name string, d *Daemon) {
	w.lab.Check(t, name, func(c *C) {
		code, err := d.Stop(30 * time.Second)
		if err != nil {
			c.Fatal(err)
		}
		c.Equal("0", fmt.Sprint(code))
	})
}

// device: the first instance, before any RDMA module.
func (w *devWait) device(t *testing.T) {
	l := w.lab
	var d *Daemon
	l.Check(t, "no RDMA module loaded", func(c *C) {
		var loaded []string
		for _, line := range readLines("/proc/modules") {
			if m, _, _ := strings.Cut(line, " "); m == "rdma_rxe" || m == "ib_uverbs" || m == "rdma_ucm" {
				loaded = append(loaded, m)
			}
		}
		if len(loaded) > 0 {
			c.Abort("loaded already: %s (this group needs a fresh guest)", strings.Join(loaded, " "))
		}
		c.Pass("none of rdma_rxe, ib_uverbs, rdma_ucm")
	})
	l.Check(t, "waits for a device (default --config)", func(c *C) {
		d = w.start(c, devWaitIP, false)
		st, err := w.waitState(d, devWaitIP)
		if err != nil {
			c.Abort("%v", err)
		}
		c.Pass("srptarget status: %s; listener %s", st.State, st.Listeners[0].State)
	})
	l.Check(t, "still running after 2 s", func(c *C) {
		time.Sleep(2 * time.Second)
		if !d.Alive() {
			c.Fatalf("exited%s", d.Gone())
		}
		c.Pass("pid %d", d.PID)
	})
	l.Check(t, "listens once rxe0 is up", func(c *C) {
		t0 := Uptime()
		w.needRXE(c)
		detail, err := w.listens(d, 15*time.Second, t0)
		if err != nil {
			c.Abort("%v", err)
		}
		c.Pass("%s (from the start of the soft-RoCE setup), no reload", detail)
	})
	l.Check(t, "ib_srp login after the wait", func(c *C) {
		w.login(c, 1)
		if err := l.Logout(); err != nil {
			c.Fatal(err)
		}
	})
	w.stop(t, "exit status after SIGTERM", d)
}

// address: rxe0 is up, the listener's address is not on its netdev until ip addr add.
func (w *devWait) address(t *testing.T) {
	l := w.lab
	var d *Daemon
	l.Check(t, "waits for a listener's address", func(c *C) {
		w.needRXE(c)
		d = w.start(c, devWaitOtherIP, false)
		st, err := w.waitState(d, devWaitOtherIP)
		if err != nil {
			c.Fatal(err)
		}
		c.Pass("srptarget status: %s; listener %s:%d %s", st.State, devWaitOtherIP, w.port, ListenerWaitingAddress)
	})
	if d == nil || !d.Alive() {
		return
	}
	l.Check(t, "no new attempt while nothing changes", func(c *C) {
		time.Sleep(3 * time.Second)
		lines := d.LogLines(MsgListenerWaits, 0)
		if len(lines) != 1 {
			c.Fatalf("want 1 line %q in 3 s, got %d", MsgListenerWaits, len(lines))
		}
		c.Pass("1 line %q: %s", MsgListenerWaits, lines[0].Field("error"))
	})
	l.Check(t, "listens once the address is added", func(c *C) {
		t0 := Uptime()
		if o := l.Run("ip", "addr", "add", devWaitOtherIP+"/16", "dev", w.rxe.Netdev); !o.OK() {
			c.Fatalf("ip addr add: exit %d", o.Code)
		}
		detail, err := w.listens(d, 10*time.Second, t0)
		if err != nil {
			c.Fatal(err)
		}
		c.Pass("%s", detail)
	})
	w.stop(t, "exit status after SIGTERM (second instance)", d)
}

// sigterm: SIGTERM while the daemon waits for an address no device will have.
func (w *devWait) sigterm(t *testing.T) {
	l := w.lab
	var d *Daemon
	l.Check(t, "third instance waits", func(c *C) {
		d = w.start(c, devWaitNeverIP, false)
		if _, err := w.waitState(d, devWaitNeverIP); err != nil {
			c.Fatal(err)
		}
		c.Pass("listener %s:%d %s", devWaitNeverIP, w.port, ListenerWaitingAddress)
	})
	var t0 time.Duration
	var code int
	l.Check(t, "SIGTERM while waiting: exit status", func(c *C) {
		t0 = Uptime()
		if err := d.Signal(syscall.SIGTERM); err != nil {
			c.Fatal(err)
		}
		var ok bool
		if code, ok = d.WaitExit(30 * time.Second); !ok {
			c.Fatalf("still running 30 s after SIGTERM")
		}
		c.Equal("0", fmt.Sprint(code))
	})
	l.Check(t, "SIGTERM while waiting: prompt", func(c *C) {
		if d.Alive() {
			c.Fatalf("still running")
		}
		if s := (d.Ended - t0).Seconds(); s >= 2 {
			c.Fatalf("exited %.1f s after SIGTERM, want under 2 s", s)
		}
		c.Pass("%.1f s", (d.Ended - t0).Seconds())
	})
}

// lateStart: the first stage passes, the second fails when rxe0 comes back, a reload after the
// fix starts it.
func (w *devWait) lateStart(t *testing.T) {
	l := w.lab
	var d *Daemon
	l.Check(t, "rxe0 deleted", func(c *C) {
		r := w.needRXE(c)
		if o := l.Run("rdma", "link", "delete", r.Name); !o.OK() {
			c.Abort("rdma link delete %s: exit %d", r.Name, o.Code)
		}
		if !WaitFor(10*time.Second, func() bool { _, err := os.Stat("/sys/class/infiniband/" + r.Name); return err != nil }) {
			c.Abort("/sys/class/infiniband/%s still there 10 s after rdma link delete", r.Name)
		}
		c.Pass("no RDMA device")
	})
	l.Check(t, "waits for a device (fourth instance)", func(c *C) {
		if err := os.MkdirAll(devWaitLUNDir, 0o700); err != nil {
			c.Abort("%v", err)
		}
		d = w.start(c, devWaitIP, true)
		st, err := w.waitState(d, devWaitIP)
		if err != nil {
			c.Abort("%v", err)
		}
		c.Pass("srptarget status: %s (LUN 1's directory checked)", st.State)
	})
	if d == nil {
		return
	}
	mark := d.LogMark()
	l.Check(t, "the late start fails with the reason", func(c *C) {
		if err := os.Remove(devWaitLUNDir); err != nil {
			c.Abort("%v", err)
		}
		if o := l.Run("rdma", "link", "add", w.rxe.Name, "type", "rxe", "netdev", w.rxe.Netdev); !o.OK() {
			c.Abort("rdma link add: exit %d", o.Code)
		}
		var failed []LogLine
		if !WaitFor(15*time.Second, func() bool { failed = d.LogLines(MsgStartFailedLate, mark); return len(failed) > 0 }) {
			c.Fatalf("no %q logged 15 s after rdma link add%s", MsgStartFailedLate, d.Gone())
		}
		for _, e := range d.LogLines(MsgConfigError, mark) {
			if strings.Contains(e.Field("error"), "luns[1].path") {
				c.Pass("%s errors=%s; %s", MsgStartFailedLate, failed[0].Field("errors"), e.Field("error"))
				return
			}
		}
		c.Fatalf("%q without a %q naming luns[1].path", MsgStartFailedLate, MsgConfigError)
	})
	l.Check(t, "still running after the failed start", func(c *C) {
		if !d.Alive() {
			c.Abort("exited%s", d.Gone())
		}
		c.Pass("pid %d", d.PID)
	})
	l.Check(t, "status exits 4 after the failed start", func(c *C) {
		var st Status
		code, err := d.Ask(&st, "status")
		if err != nil {
			c.Fatal(err)
		}
		if st.State != StateWaitingDevice {
			c.Fatalf("state %q, want %q", st.State, StateWaitingDevice)
		}
		c.Equal("4", fmt.Sprint(code))
	})
	l.Check(t, "srptarget reload after the fix: exit status", func(c *C) {
		if err := os.Mkdir(devWaitLUNDir, 0o700); err != nil {
			c.Fatal(err)
		}
		r, code, err := d.Reload(false)
		if err != nil {
			c.Fatal(err)
		}
		if code != 0 {
			c.Fatalf("exit %d: %v", code, r.Errors)
		}
		c.Pass("0 (applied %v)", r.Applied)
	})
	l.Check(t, "listens after the reload", func(c *C) {
		detail, err := w.listens(d, 15*time.Second, Uptime())
		if err != nil {
			c.Abort("%v", err)
		}
		c.Pass("%s", detail)
	})
	l.Check(t, "ib_srp login after the late start", func(c *C) { w.login(c, 2) })
	l.Check(t, "LUN 1's file made by the late start", func(c *C) {
		fi, err := os.Stat(devWaitLUNDir + "/lun1.img")
		if err != nil {
			c.Fatal(err)
		}
		c.Pass("%d bytes", fi.Size())
	})
	l.Check(t, "logout", func(c *C) {
		if err := l.Logout(); err != nil {
			c.Fatal(err)
		}
		c.Pass("disks removed")
	})
	w.stop(t, "exit status after SIGTERM (fourth instance)", d)
}
