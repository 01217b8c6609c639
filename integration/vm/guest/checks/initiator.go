package checks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The kernel's SRP initiator (ib_srp) as sysfs shows it.

// Login loads ib_srp (its module parameters from the srp_params argument, comma separated,
// e.g. srp_params=never_register=1,ch_count=1) and writes opts to the add_target file of the
// rxe device's port 1.
//
// A target port deleted by Logout stays on ib_srp's list until its removal work has also
// disconnected and freed the channels, which ends after the disks are gone: add_target for
// the same target meanwhile fails with EEXIST ("Already connected"). Login retries that for up
// to 10 s; any other error is returned at once.
func (l *Lab) Login(rxe *RXE, opts string) error {
	var err error
	for i := range 50 {
		if err = l.loginOnce(rxe, opts); err == nil {
			if i > 0 {
				l.Printf("SRPTVM: add_target: EEXIST %d time(s) while the previous target port was being removed", i)
			}
			return nil
		}
		if !errors.Is(err, syscall.EEXIST) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

// loginOnce writes opts to add_target once, ib_srp loaded first.
func (l *Lab) loginOnce(rxe *RXE, opts string) error {
	for _, m := range []string{"sd_mod", "sg"} {
		if o := Quiet("modprobe", m); !o.OK() {
			return fmt.Errorf("modprobe %s: %s", m, o.Text)
		}
	}
	if _, err := os.Stat("/sys/module/ib_srp"); err != nil {
		args := []string{"ib_srp"}
		if p := l.Arg("srp_params", ""); p != "" {
			args = append(args, strings.Split(p, ",")...)
		}
		if o := l.Run("modprobe", args...); !o.OK() {
			return fmt.Errorf("modprobe ib_srp: exit %d", o.Code)
		}
	}
	f := "/sys/class/infiniband_srp/srp-" + rxe.Name + "-1/add_target"
	l.Printf("SRPTVM$ echo '%s' > %s", opts, f)
	return os.WriteFile(f, []byte(opts), 0o200)
}

// SRPDisks are the sd disks whose SCSI host is an ib_srp host, sorted.
func SRPDisks() []string {
	paths, _ := filepath.Glob("/sys/block/sd*")
	var out []string
	for _, p := range paths {
		d := filepath.Base(p)
		if readTrim("/sys/class/scsi_host/"+DiskHost(d)+"/proc_name") == "ib_srp" {
			out = append(out, d)
		}
	}
	return out
}

// DiskHost is the SCSI host (hostN) of a disk.
func DiskHost(disk string) string {
	p, err := filepath.EvalSymlinks("/sys/block/" + disk + "/device")
	if err != nil {
		return ""
	}
	p, _, _ = strings.Cut(p, "/target")
	return filepath.Base(p)
}

// DiskLUN is the LUN of a disk (the L of H:C:T:L), -1 when it cannot be read.
func DiskLUN(disk string) int {
	p, err := filepath.EvalSymlinks("/sys/block/" + disk + "/device")
	if err != nil {
		return -1
	}
	hctl := strings.Split(filepath.Base(p), ":")
	n := -1
	fmt.Sscan(hctl[len(hctl)-1], &n)
	return n
}

// DiskForLUN is the ib_srp disk with LUN lun, "" when there is none.
func DiskForLUN(lun int) string {
	for _, d := range SRPDisks() {
		if DiskLUN(d) == lun {
			return d
		}
	}
	return ""
}

// DiskOf is the ib_srp disk of the SRP target port with that id_ext (16 hex digits), "" when
// there is none: which of two target ports a disk came through.
func DiskOf(idExt string) string {
	for _, d := range SRPDisks() {
		if readTrim("/sys/class/scsi_host/"+DiskHost(d)+"/id_ext") == "0x"+idExt {
			return d
		}
	}
	return ""
}

// DiskIOs is the reads and writes a block device (sdX, dm-N) completed: fields 1 and 5 of
// /sys/block/DEV/stat.
func DiskIOs(dev string) int64 {
	f := strings.Fields(readTrim("/sys/block/" + dev + "/stat"))
	if len(f) < 5 {
		return -1
	}
	var r, w int64
	fmt.Sscan(f[0], &r)
	fmt.Sscan(f[4], &w)
	return r + w
}

// DiskWrites is the write commands and sectors a disk completed (fields 5 and 7).
func DiskWrites(dev string) (ios, sectors int64) {
	f := strings.Fields(readTrim("/sys/block/" + dev + "/stat"))
	if len(f) < 7 {
		return -1, -1
	}
	fmt.Sscan(f[4], &ios)
	fmt.Sscan(f[6], &sectors)
	return ios, sectors
}

// RemotePorts are the SRP remote ports (/sys/class/srp_remote_ports/port-*).
func RemotePorts() []string {
	p, _ := filepath.Glob("/sys/class/srp_remote_ports/port-*")
	return p
}

// RportState is the first SRP remote port's state (running, blocked, fail-fast, lost).
func RportState() string {
	for _, p := range RemotePorts() {
		return readTrim(p + "/state")
	}
	return ""
}

// Logout deletes every SRP remote port and waits for the disks and then the ports to go: the
// disks go before ib_srp has finished removing the target port (srp_remove_target: the SCSI
// host first, then the RDMA channels), and a daemon stopped before that disconnects channels
// ib_srp still owns, whose reconnect timer can bring the port back. A disk is gone when its
// /sys/block entry is: its SCSI host's class device goes first, which leaves the disk
// unrecognisable as ib_srp's before it is gone.
func (l *Lab) Logout() error {
	disks := SRPDisks()
	for _, p := range RemotePorts() {
		if err := l.Write(p+"/delete", "1"); err != nil {
			l.Printf("SRPTVM: %v", err)
		}
	}
	if err := waitDisksGone(disks, 30*time.Second); err != nil {
		return err
	}
	if !WaitFor(30*time.Second, func() bool { return len(RemotePorts()) == 0 }) {
		return fmt.Errorf("SRP remote ports still present: %s", strings.Join(RemotePorts(), " "))
	}
	if len(disks) > 0 {
		l.Printf("removed: %s", strings.Join(disks, " "))
	}
	return nil
}

// waitDisksGone waits up to d for the disks' /sys/block entries to go.
func waitDisksGone(disks []string, d time.Duration) error {
	var left []string
	if WaitFor(d, func() bool {
		left = left[:0]
		for _, x := range disks {
			if _, err := os.Stat("/sys/block/" + x); err == nil {
				left = append(left, x)
			}
		}
		return len(left) == 0
	}) {
		return nil
	}
	return fmt.Errorf("SRP disks still present %v after the logout: %s", d, strings.Join(left, " "))
}

// HostAttr is an attribute of a SCSI host (/sys/class/scsi_host/hostN/ATTR).
func HostAttr(host, attr string) string { return readTrim("/sys/class/scsi_host/" + host + "/" + attr) }
