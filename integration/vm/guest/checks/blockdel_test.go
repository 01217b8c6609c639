//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBlockDel is the control for TestStress's devdel, without SRP or RDMA
// (integration/vm/blockdel.sh): fio with crc32c verify and verify_backlog on a scsi_debug disk
// that is deleted under I/O, once through the block device (libaio, O_DIRECT) and once through
// its SCSI generic device (the sg engine).
//
// Through the block device fio may report "bad header offset X, wanted Y" although the disk
// never returned wrong data: del_gendisk sets the capacity to 0, direct reads past it return 0
// bytes and fio verifies the stale contents of its buffer (writes fail with ENOSPC); timing
// decides how many (12 in one run, 0 in another), so that row records the count and fails only
// when fio did no I/O. Through /dev/sgN the same commands fail with an error: that row fails on
// any verify error, as devdel's does, and when the deletion went unseen (no I/O error).
func TestBlockDel(t *testing.T) {
	l := NewLab(t)
	for _, m := range []string{"sd_mod", "sg"} {
		if o := l.Run("modprobe", m); !o.OK() {
			t.Fatalf("modprobe %s: exit %d", m, o.Code)
		}
	}
	for _, engine := range []string{"libaio", "sg"} {
		l.Group(t, engine, "scsi_debug disk deleted under fio ("+engine+")", func(t *testing.T) {
			blockDel(t, l, engine)
		})
	}
}

// blockDel is one engine's run: scsi_debug loaded, fio started, the disk deleted after 4 s.
func blockDel(t *testing.T, l *Lab, engine string) {
	name := "fio through the " + map[string]string{"libaio": "block device", "sg": "SCSI generic device"}[engine] + " (" + engine + "), disk deleted"
	l.Check(t, name, func(c *C) {
		if o := l.Run("modprobe", "scsi_debug", "dev_size_mb=64", "delay=1"); !o.OK() {
			c.Fatalf("modprobe scsi_debug: exit %d", o.Code)
		}
		defer l.Run("rmmod", "scsi_debug")
		var sd string
		WaitFor(20*time.Second, func() bool {
			m, _ := filepath.Glob("/sys/bus/pseudo/drivers/scsi_debug/adapter*/host*/target*/*/block/*")
			if len(m) > 0 {
				sd = filepath.Base(m[0])
			}
			return sd != ""
		})
		if sd == "" {
			c.Fatalf("no scsi_debug disk 20 s after modprobe")
		}
		dev, opts := "/dev/"+sd, []string{"--direct=1"}
		if engine == "sg" {
			sgs, _ := os.ReadDir("/sys/block/" + sd + "/device/scsi_generic")
			if len(sgs) == 0 {
				c.Fatalf("%s has no SCSI generic device", sd)
			}
			dev, opts = "/dev/"+sgs[0].Name(), nil
		}
		fio := l.startFio(append([]string{"--name=inflight", "--filename=" + dev, "--ioengine=" + engine,
			"--rw=randwrite", "--bs=16k", "--iodepth=16", "--size=16M", "--offset=32M", "--verify_backlog=64",
			"--time_based", "--runtime=30"}, opts...)...)
		time.Sleep(4 * time.Second)
		if err := l.Write("/sys/block/"+sd+"/device/delete", "1"); err != nil {
			c.Fatalf("deleting %s: %v", sd, err)
		}
		r, ok := fio.wait(90 * time.Second)
		switch {
		case !ok:
			c.Fatalf("fio still running 90 s after the deletion")
		case r.Writes == 0:
			c.Fatalf("fio did no I/O before the deletion: %s%s", r.Summary(), problem(r.Problem))
		case engine == "sg" && r.VerifyErrors != 0:
			c.Fatalf("verify errors through %s, where a deleted disk's commands fail: %s%s", dev, r.Summary(), problem(r.Problem))
		case engine == "sg" && r.IOErrors == 0 && r.Errno == 0:
			c.Fatalf("fio through %s saw no error from the deletion: %s", dev, r.Summary())
		}
		c.Pass("%s: %s", dev, r.Summary()+fmt.Sprintf(" (errno %d)", r.Errno))
	})
}
