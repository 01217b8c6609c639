//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// scsi: what each LUN says of itself through sg3_utils, against the configuration.
func (s *e2e) scsi(t *testing.T) {
	for i, lun := range e2eLUNs {
		s.lab.Step("SCSI: LUN %d", lun.lun)
		s.scsiChecks(t, lun, func() string { return s.dev[i] })
	}
	s.lab.Check(t, "sg_luns", func(c *C) {
		s.needSession(c)
		o := s.lab.Run("sg_luns", s.dev[0])
		c.Equal("0000000000000000 0001000000000000", strings.Join(LUNList(o.Text), " "))
	})
}

// lunChecks are the checks of one LUN; dev is its disk once the session is there.
type lunChecks struct {
	s   *e2e
	lun lunSpec
	dev func() string
}

func (k lunChecks) check(t *testing.T, what string, f func(c *C)) {
	k.s.lab.Check(t, fmt.Sprintf("LUN %d %s", k.lun.lun, what), f)
}

// sg runs an sg3_utils command on the LUN's disk.
func (k lunChecks) sg(c *C, args ...string) Out {
	k.s.needSession(c)
	return k.s.lab.Run(args[0], append(args[1:], k.dev())...)
}

// scsiChecks are the checks of one LUN.
func (s *e2e) scsiChecks(t *testing.T, lun lunSpec, dev func() string) {
	k := lunChecks{s, lun, dev}
	k.identity(t)
	k.limits(t)
	k.capacity(t)
}

// identity: INQUIRY and the VPD pages that name the LUN.
func (k lunChecks) identity(t *testing.T) {
	lun, sg := k.lun, k.sg
	k.check(t, "sg_inq", func(c *C) {
		o := sg(c, "sg_inq")
		c.Equal(lun.vendor+"/"+lun.product+"/"+lun.rev, Field(o.Text, "Vendor identification")+"/"+
			Field(o.Text, "Product identification")+"/"+Field(o.Text, "Product revision level"))
	})
	// 0x8f, third-party copy: EXTENDED COPY between the LUNs an initiator sees.
	k.check(t, "VPD 0x00", func(c *C) {
		want := "sv sn di ei tpc bl bdc"
		if lun.thin {
			want += " lbpv"
		}
		c.Equal(want, strings.Join(VPDPages(sg(c, "sg_vpd", "-p", "0x00").Text), " "))
	})
	k.check(t, "VPD 0x80 serial", func(c *C) {
		c.Equal(lun.serial, Field(sg(c, "sg_vpd", "-p", "0x80").Text, "Unit serial number"))
	})
	k.check(t, "VPD 0x83 NAA", func(c *C) {
		o := sg(c, "sg_vpd", "-p", "0x83")
		want := NAAOf(lun.serial)
		wwid := readTrim("/sys/block/" + strings.TrimPrefix(k.dev(), "/dev/") + "/device/wwid")
		if !strings.Contains(o.Text, "0x"+want) || !strings.Contains(o.Text, "NAA") || wwid != "naa."+want {
			c.Fatalf("want NAA 0x%s; sysfs wwid '%s'", want, wwid)
		}
		c.Pass("0x%s; sysfs wwid %s; T10 vendor id %s", want, wwid, Field(o.Text, "vendor id"))
	})
	// Extended INQUIRY data: the three task attributes, a volatile cache.
	k.check(t, "VPD 0x86 extended inquiry", func(c *C) {
		c.Equal("HEADSUP=1 ORDSUP=1 SIMPSUP=1 NV_SUP=0 V_SUP=1",
			Flags(sg(c, "sg_vpd", "-p", "0x86").Text, "HEADSUP", "ORDSUP", "SIMPSUP", "NV_SUP", "V_SUP"))
	})
}

// limits: the block limits, the medium and the provisioning pages.
func (k lunChecks) limits(t *testing.T) {
	lun, sg := k.lun, k.sg
	k.check(t, "VPD 0xb0 limits", func(c *C) {
		c.Equal(blockLimits(lun).String(), ParseBlockLimits(sg(c, "sg_vpd", "-p", "0xb0").Text).String())
	})
	k.check(t, "VPD 0xb1", func(c *C) {
		want := "Medium rotation rate is not reported"
		if lun.nonRotating {
			want = "Non-rotating medium"
		}
		if o := sg(c, "sg_vpd", "-p", "0xb1"); !strings.Contains(o.Text, want) {
			c.Fatalf("want '%s': %s", want, o.Text)
		}
		c.Pass("%s", want)
	})
	if lun.thin {
		k.check(t, "VPD 0xb2 thin", func(c *C) {
			o := sg(c, "sg_vpd", "-p", "0xb2")
			c.Equal("LBPU=1 LBPWS=1 LBPWS10=1 provisioning type 2 (thin provisioned)",
				fmt.Sprintf("LBPU=%s LBPWS=%s LBPWS10=%s provisioning type %s", Field(o.Text, "(LBPU)"),
					Field(o.Text, "(LBPWS)"), Field(o.Text, "(LBPWS10)"), Field(o.Text, "Provisioning type")))
		})
		return
	}
	k.check(t, "VPD 0xb2 absent", func(c *C) {
		o := sg(c, "sg_vpd", "-p", "0xb2")
		if o.OK() {
			c.Fatalf("answered although thin provisioning is off")
		}
		c.Pass("not offered without thin provisioning: sg_vpd exit %d", o.Code)
	})
}

// capacity: the error recovery mode page, READ CAPACITY and the disk's size.
func (k lunChecks) capacity(t *testing.T) {
	lun, sg := k.lun, k.sg
	// Mode page 01h, read-write error recovery: there, all zero.
	k.check(t, "mode page 0x01", func(c *C) {
		o := sg(c, "sg_modes", "-p", "0x01")
		line := lineWith(o.Text, "error recovery")
		if !o.OK() || line == "" {
			c.Fatalf("sg_modes exit %d: %s", o.Code, o.Text)
		}
		c.Pass("sg_modes -p 0x01: %s", strings.TrimSpace(line))
	})
	k.check(t, "sg_readcap -l", func(c *C) {
		got, err := ParseCapacity(sg(c, "sg_readcap", "-l").Text)
		if err != nil {
			c.Fatal(err)
		}
		want := Capacity{Blocks: uint64(lun.mib<<20) / uint64(lun.bs), BlockLength: uint32(lun.bs)}
		if lun.thin {
			want.LBPME = 1
		}
		c.Equal(want.String(), got.String())
	})
	k.check(t, "lsblk size", func(c *C) {
		c.Equal(fmt.Sprint(lun.mib<<20), strings.TrimSpace(sg(c, "lsblk", "-b", "-d", "-n", "-o", "SIZE").Text))
	})
}

// blockLimits is what VPD page 0xb0 must say: MAXIMUM TRANSFER LENGTH from the configured
// max_transfer_size, MAXIMUM WRITE SAME LENGTH at most that, and for a thin LUN MAXIMUM UNMAP LBA
// COUNT of 1 GiB, at most 1 Mi blocks, in 256 descriptors.
func blockLimits(lun lunSpec) BlockLimits {
	mtl := int64(e2eMaxTransfer << 20 / lun.bs)
	b := BlockLimits{MaxTransfer: mtl, MaxWriteSame: mtl}
	if lun.thin {
		b.MaxUnmapLBAs, b.MaxUnmapDescriptors = int64(min(1<<30/lun.bs, 1<<20)), 256
	}
	return b
}

// filesystem: ext4 on the file LUN, and GET LBA STATUS after a discard.
func (s *e2e) filesystem(t *testing.T) {
	l := s.lab
	l.Step("ext4 on LUN 1")
	l.Check(t, "ext4 on file LUN", func(c *C) {
		s.needSession(c)
		if err := s.ext4(s.dev[1]); err != nil {
			c.Fatal(err)
		}
		c.Pass("mkfs (with discard), 16 MiB + 21 small files, unmount, mount, sha256 equal, e2fsck clean")
	})
	l.Check(t, "file LUN through io_uring", s.checkIOURing)
	if fi, err := os.Stat(e2eLUNs[1].path); err == nil {
		l.Printf("%s after ext4: %d bytes, %d allocated", e2eLUNs[1].path, fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks*512)
	}
	l.Step("blkdiscard and GET LBA STATUS on LUN 1")
	l.Check(t, "GET LBA STATUS after blkdiscard", s.checkLBAStatus)
}

// ext4 makes a file system on dev (mkfs discards: UNMAP), writes files, mounts it again after
// dropping the caches, compares their checksums and runs e2fsck.
func (s *e2e) ext4(dev string) error {
	l := s.lab
	script := `set -e
mkdir -p /mnt/srp /tmp/files
mkfs.ext4 -F DEV
mount -t ext4 DEV /mnt/srp
dd if=/dev/urandom of=/mnt/srp/big bs=1M count=16 status=none
for i in $(seq 1 20); do head -c $((i * 3000 + 17)) /dev/urandom >/mnt/srp/small-$i; done
mkdir -p /mnt/srp/dir && cp /mnt/srp/small-1 /mnt/srp/dir/copy
(cd /mnt/srp && sha256sum big small-* dir/copy) >/tmp/files/sums
umount /mnt/srp
echo 3 >/proc/sys/vm/drop_caches
mount -t ext4 DEV /mnt/srp
(cd /mnt/srp && sha256sum -c /tmp/files/sums) || { umount /mnt/srp; exit 1; }
df -h /mnt/srp
umount /mnt/srp
e2fsck -f -n DEV`
	if o := l.Sh(strings.ReplaceAll(script, "DEV", dev)); !o.OK() {
		return fmt.Errorf("exit %d: %s", o.Code, lastLine(o))
	}
	return nil
}

// checkLBAStatus: 16 MiB of data at 400 MiB (past what ext4 and the later checks use), then
// blkdiscard of the 8 MiB from 404 MiB: the file gets a hole of 8 MiB, and GET LBA STATUS from
// 400 MiB reports 4 MiB mapped, 8 MiB deallocated, then mapped again from 412 MiB (where that
// run ends depends on the rest of the file).
func (s *e2e) checkLBAStatus(c *C) {
	s.needSession(c)
	const mib, base = 1 << 20, 400
	bs, dev, path := e2eLUNs[1].bs, s.dev[1], e2eLUNs[1].path
	l := s.lab
	if o := l.Run("dd", "if=/dev/urandom", "of="+dev, "bs=1M", fmt.Sprint("seek=", base), "count=16",
		"oflag=direct", "conv=notrunc", "status=none"); !o.OK() {
		c.Fatalf("dd: exit %d", o.Code)
	}
	a0 := allocated(path)
	if o := l.Run("blkdiscard", "-o", fmt.Sprint((base+4)*mib), "-l", fmt.Sprint(8*mib), dev); !o.OK() {
		c.Fatalf("blkdiscard: exit %d", o.Code)
	}
	freed := (a0 - allocated(path)) / mib
	ds := ParseLBAStatus(l.Run("sg_get_lba_status", fmt.Sprint("--lba=", base*mib/bs), "--maxlen=56", "-b", dev).Text)
	var got []string
	for i, d := range ds {
		if i == 2 {
			got = append(got, fmt.Sprintf("%d:%d", d.LBA, d.Status))
			break
		}
		got = append(got, fmt.Sprintf("%d:%d:%d", d.LBA, d.Blocks, d.Status))
	}
	want := fmt.Sprintf("%d:%d:0 %d:%d:1 %d:0", base*mib/bs, 4*mib/bs, (base+4)*mib/bs, 8*mib/bs, (base+12)*mib/bs)
	c.Equal(fmt.Sprintf("descriptors (LBA:blocks:status) %s; the file freed 8 MiB", want),
		fmt.Sprintf("descriptors (LBA:blocks:status) %s; the file freed %d MiB", strings.Join(got, " "), freed))
}

// allocated is the bytes a file has on disk.
func allocated(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

// lastLine is the last line of a command's output.
func lastLine(o Out) string {
	lines := o.Lines()
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}

// checkIOURing: with limits.backstore_io auto (the default) the daemon reads and writes the
// file LUN through its poll groups' io_uring: status says io_uring, and the daemon holds rings
// whose completion queues have moved (fdinfo's CqHead: completions reaped), after ext4.
func (s *e2e) checkIOURing(c *C) {
	d := s.needDaemon(c)
	st, err := d.Status()
	if err != nil {
		c.Fatal(err)
	}
	if st.BackstoreIO != "io_uring" {
		c.Fatalf("status: backstore I/O %q (%s), want io_uring", st.BackstoreIO, st.BackstoreIONote)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.PID))
	if err != nil {
		c.Fatal(err)
	}
	rings, reaped := 0, uint64(0)
	for _, fd := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", d.PID, fd.Name()))
		if target != "anon_inode:[io_uring]" {
			continue
		}
		rings++
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", d.PID, fd.Name()))
		if err != nil {
			c.Fatal(err)
		}
		found := false
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "CqHead:"); ok {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
				if err != nil {
					c.Fatalf("fdinfo %s: %q: %v", fd.Name(), line, err)
				}
				reaped += n
				found = true
			}
		}
		if !found {
			c.Fatalf("fdinfo %s of an io_uring has no CqHead: %s", fd.Name(), info)
		}
	}
	// ext4's mkfs, files, checksums after a cache drop and e2fsck make a few hundred requests
	// on the file LUN; with the sync engine, or a store that hides AsyncStore, none.
	if rings == 0 || reaped < 100 {
		c.Fatalf("the daemon holds %d io_uring(s), %d completions reaped (want at least 100 after ext4 on the file LUN)", rings, reaped)
	}
	c.Pass("status: backstore I/O io_uring; %d ring(s), %d completions reaped (fdinfo CqHead)", rings, reaped)
}
