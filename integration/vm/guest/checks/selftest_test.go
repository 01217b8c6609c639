//go:build vmguest

package checks

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSelfTest proves the VM harness without srptarget (e2e.sh runs it when the e2e run fails,
// to tell a broken VM from a daemon failure): soft-RoCE, user-space verbs (RC and RDMA/CM), and
// a real SRP login of the Linux ib_srp initiator to the kernel's own SRP target (LIO ib_srpt)
// serving a RAM disk, with SCSI queries, a data check, a fio verify run, ext4, and logout; then
// a second login over IPv6.
//
// Arguments (k=v): port=5000 (ib_srpt's RDMA/CM port), rd_mib=256 (RAM disk size),
// fio_runtime=5, ipv6_login=1 (0 skips the IPv6 login), plus SetupRXE's.
func TestSelfTest(t *testing.T) {
	l := NewLab(t)
	s := &selfTest{lab: l, port: l.ArgInt("port", 5000), rdMiB: l.ArgInt("rd_mib", 256)}
	l.Group(t, "verbs", "soft-RoCE and user-space verbs", s.verbs)
	l.Group(t, "LIO", "LIO ib_srpt: a RAM disk on RDMA/CM", s.lio)
	l.Group(t, "ipv4", "ib_srp over IPv4: SCSI, data, fio, ext4", s.ipv4)
	if l.Arg("ipv6_login", "1") == "1" {
		l.Group(t, "ipv6", "ib_srp over IPv6", s.ipv6)
	}
	l.Check(t, "kernel log", func(c *C) { c.CheckKernelLog() })
}

const (
	lioCfg    = "/sys/kernel/config/target"
	lioSerial = "srptvm-ramdisk0"
	lioInqID  = "LIO-ORG/RAMDISK-MCP"
)

type selfTest struct {
	lab   *Lab
	port  int
	rdMiB int
	rxe   *RXE
	guid  string // ib_srpt's service GUID: id_ext and ioc_guid of the logins
	dev   string
	kmark int
	data  []byte // written over IPv4 and on ext4
}

func (s *selfTest) needRXE(c *C) *RXE {
	if s.rxe == nil {
		s.rxe = s.lab.MustRXE(c)
	}
	return s.rxe
}

// TCPListening says whether a TCP socket (v4 or v6) listens on port.
func TCPListening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		for _, line := range readLines(f) {
			x := strings.Fields(line)
			if len(x) > 3 && x[3] == "0A" && strings.HasSuffix(x[1], want) {
				return true
			}
		}
	}
	return false
}

// pair runs a server in the background, waits for it to listen, then the client; both must
// exit 0.
func (s *selfTest) pair(c *C, listening func() bool, server, client []string) string {
	l := s.lab
	l.Printf("SRPTVM$ %s &", strings.Join(server, " "))
	srv := exec.Command(server[0], server[1:]...)
	var sout bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		c.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	if !WaitFor(20*time.Second, listening) {
		_ = srv.Process.Kill()
		<-done
		c.Fatalf("the server did not listen in 20 s: %s", oneLine(sout.String()))
	}
	o := l.Run(client[0], client[1:]...)
	var serr error
	select {
	case serr = <-done:
	case <-time.After(60 * time.Second):
		_ = srv.Process.Kill()
		serr = <-done
	}
	l.Printf("%s", strings.TrimRight(sout.String(), "\n"))
	if !o.OK() || serr != nil {
		c.Fatalf("client exit %d, server %v", o.Code, serr)
	}
	return o.Text
}

func (s *selfTest) verbs(t *testing.T) {
	l := s.lab
	l.Check(t, "rxe", func(c *C) {
		t0 := Uptime()
		r := s.needRXE(c)
		c.Pass("%s on %s, node GUID %s, GID[%d] %s, GID[%d] %s (%s s)", r.Name, r.Netdev, r.GUID, r.GID4, r.IP4, r.GID6, r.IP6, Since(t0))
	})
	l.Check(t, "ibv_devinfo", func(c *C) {
		r := s.needRXE(c)
		o := l.Run("ibv_devinfo", "-d", r.Name)
		if !strings.Contains(Field(o.Text, "state"), "PORT_ACTIVE") {
			c.Fatalf("port 1 not PORT_ACTIVE: state %q", Field(o.Text, "state"))
		}
		c.Pass("PORT_ACTIVE, active_mtu %s, link_layer %s", Field(o.Text, "active_mtu"), Field(o.Text, "link_layer"))
	})
	l.Check(t, "ibv_rc_pingpong", func(c *C) {
		r := s.needRXE(c)
		// server and client in this VM; they exchange QP numbers over TCP port 18515
		g := strconv.Itoa(r.GID4)
		out := s.pair(c, func() bool { return TCPListening(18515) },
			[]string{"timeout", "60", "ibv_rc_pingpong", "-d", r.Name, "-g", g, "-n", "200"},
			[]string{"timeout", "60", "ibv_rc_pingpong", "-d", r.Name, "-g", g, "-n", "200", "127.0.0.1"})
		var usec string
		for _, f := range strings.Split(out, "\n") {
			if i := strings.Index(f, " usec/iter"); i > 0 {
				x := strings.Fields(f[:i])
				usec = x[len(x)-1]
			}
		}
		if usec == "" {
			c.Fatalf("no usec/iter in the client's output: %s", oneLine(out))
		}
		c.Pass("200 x 4096 B, %s usec/iter", usec)
	})
	for _, v6 := range []bool{false, true} {
		name := "rping "
		l.Check(t, name+map[bool]string{false: "IPv4", true: "IPv6"}[v6], func(c *C) {
			r := s.needRXE(c)
			ip := r.IP4
			if v6 {
				ip = r.IP6
			}
			s.pair(c, func() bool { return CMListening(7174) },
				[]string{"timeout", "60", "rping", "-s", "-a", ip, "-C", "20"},
				[]string{"timeout", "60", "rping", "-c", "-a", ip, "-C", "20", "-V"})
			c.Pass("%s: 20 RDMA read/write ping-pongs with data verify (-V)", ip)
		})
	}
}

// lioSetup is ib_srpt serving a RAM disk on the RDMA/CM port, to rxe0's IPv4 and IPv6
// addresses (for an RDMA/CM login ib_srpt names the initiator after its source IP address, an
// IPv6 one fully expanded: %pI6, not %pI6c).
func (s *selfTest) lioSetup(r *RXE) error {
	l := s.lab
	for _, m := range []string{"target_core_mod", "ib_srpt"} {
		if o := l.Run("modprobe", m); !o.OK() {
			return fmt.Errorf("modprobe %s: exit %d", m, o.Code)
		}
	}
	// ib_srpt takes the node GUID of the first RDMA device as its service GUID; ib_srp's id_ext
	// and ioc_guid must both equal it.
	s.guid = strings.TrimPrefix(readTrim("/sys/module/ib_srpt/parameters/srpt_service_guid"), "0x")
	// the target port's name: the port GUID (GID 0 without the fe80:: prefix)
	tport := strings.TrimPrefix(r.port("gids/0"), "fe80:0000:0000:0000:")
	tpg := filepath.Join(lioCfg, "srpt", tport, tport)
	rd := filepath.Join(lioCfg, "core/rd_mcp_0/ramdisk0")
	gid6, err := GIDOf(r.IP6)
	if err != nil {
		return err
	}
	steps := []struct{ op, path, arg string }{
		{"mkdir", "/etc/target", ""},
		{"mkdir", rd, ""},
		{"write", rd + "/control", fmt.Sprintf("rd_pages=%d", s.rdMiB*256)},
		{"write", rd + "/enable", "1"},
		{"write", rd + "/wwn/vpd_unit_serial", lioSerial},
		{"mkdir", lioCfg + "/srpt", ""},
		{"write", lioCfg + "/srpt/discovery_auth/rdma_cm_port", strconv.Itoa(s.port)},
		{"mkdir", filepath.Dir(tpg), ""},
		{"mkdir", tpg, ""},
		{"mkdir", tpg + "/lun/lun_0", ""},
		{"link", tpg + "/lun/lun_0/ramdisk0", rd},
	}
	for _, ip := range []string{r.IP4, gid6} {
		steps = append(steps,
			struct{ op, path, arg string }{"mkdir", tpg + "/acls/" + ip, ""},
			struct{ op, path, arg string }{"mkdir", tpg + "/acls/" + ip + "/lun_0", ""},
			struct{ op, path, arg string }{"link", tpg + "/acls/" + ip + "/lun_0/lun_0", tpg + "/lun/lun_0"})
	}
	steps = append(steps, struct{ op, path, arg string }{"write", tpg + "/enable", "1"})
	for _, st := range steps {
		var err error
		switch st.op {
		case "mkdir":
			l.Printf("SRPTVM$ mkdir -p %s", st.path)
			err = os.MkdirAll(st.path, 0o755)
		case "write":
			err = l.Write(st.path, st.arg)
		case "link":
			l.Printf("SRPTVM$ ln -s %s %s", st.arg, st.path)
			err = os.Symlink(st.arg, st.path)
		}
		if err != nil {
			return err
		}
	}
	l.Printf("target port %s, service GUID %s", tport, s.guid)
	return nil
}

func (s *selfTest) lio(t *testing.T) {
	l := s.lab
	l.Check(t, "LIO configfs", func(c *C) {
		if err := s.lioSetup(s.needRXE(c)); err != nil {
			c.Abort("LIO configuration: %v", err)
		}
		c.Pass("rd_mcp RAM disk of %d MiB, ACLs for %s and %s", s.rdMiB, s.rxe.IP4, s.rxe.IP6)
	})
	l.Check(t, "ib_srpt listening", func(c *C) {
		if !WaitFor(10*time.Second, func() bool { return CMListening(s.port) }) {
			c.Abort("no RDMA/CM listener on port %d", s.port)
		}
		c.Pass("RDMA/CM port %d, service GUID %s", s.port, s.guid)
	})
}

// login logs in to dest and waits for the disk.
func (s *selfTest) login(c *C, dest string) string {
	if s.guid == "" {
		c.Abort("no LIO target: run the LIO group first")
	}
	if err := s.lab.Login(s.needRXE(c), fmt.Sprintf("id_ext=%s,ioc_guid=%s,dest=%s", s.guid, s.guid, dest)); err != nil {
		c.Abort("add_target: %v", err)
	}
	var disk string
	if !WaitFor(60*time.Second, func() bool {
		d := SRPDisks()
		if len(d) > 0 {
			disk = d[0]
		}
		return disk != "" && isBlock("/dev/"+disk)
	}) {
		c.Abort("no SCSI disk 60 s after add_target dest=%s", dest)
	}
	s.dev = "/dev/" + disk
	return disk
}

// isBlock says whether path is a block device node.
func isBlock(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
}

// inqID is "VENDOR/PRODUCT" of the standard INQUIRY data.
func (s *selfTest) inqID(dev string) string {
	o := s.lab.Run("sg_inq", dev)
	return Field(o.Text, "Vendor identification") + "/" + Field(o.Text, "Product identification")
}

func (s *selfTest) ipv4(t *testing.T) {
	l := s.lab
	l.Check(t, "srp login ipv4", func(c *C) {
		r := s.needRXE(c)
		s.kmark = KMark()
		t0 := Uptime()
		disk := s.login(c, fmt.Sprintf("%s:%d", r.IP4, s.port))
		h := DiskHost(disk)
		c.Pass("%s after %s s; ch_count %s, req_lim %s, can_queue %s", s.dev, Since(t0), HostAttr(h, "ch_count"), HostAttr(h, "req_lim"), HostAttr(h, "can_queue"))
	})
	if s.dev == "" {
		return
	}
	l.Check(t, "sg_inq vendor/product", func(c *C) { c.Equal(lioInqID, s.inqID(s.dev)) })
	l.Check(t, "sg_vpd unit serial", func(c *C) {
		c.Equal(lioSerial, Field(l.Run("sg_vpd", "-p", "sn", s.dev).Text, "Unit serial number"))
	})
	l.Check(t, "sg_readcap", func(c *C) {
		capa, err := ParseCapacity(l.Run("sg_readcap", "-l", s.dev).Text)
		if err != nil {
			c.Fatal(err)
		}
		c.Equal(fmt.Sprintf("%d x 512", s.rdMiB*2048), fmt.Sprintf("%d x %d", capa.Blocks, capa.BlockLength))
	})
	l.Check(t, "lsblk size", func(c *C) {
		c.Equal(strconv.Itoa(s.rdMiB<<20), strings.TrimSpace(l.Run("lsblk", "-b", "-d", "-n", "-o", "SIZE", s.dev).Text))
	})
	l.Check(t, "dd write/read", func(c *C) {
		s.data = random(8 << 20)
		writeAt(c, s.dev, 0, s.data)
		got := blocks(c, s.dev, 0, len(s.data)/512)
		same(c, s.data, got)
	})
	l.Check(t, "fio verify", func(c *C) {
		rt := l.ArgInt("fio_runtime", 5)
		r := l.Fio("--name=verify", "--filename="+s.dev, "--direct=1", "--rw=randwrite", "--bs=4k", "--iodepth=16",
			"--size=64M", "--time_based", fmt.Sprintf("--runtime=%d", rt), "--verify_backlog=256")
		// time_based: the last writes may be left unverified; every verify must pass.
		if !r.Clean() || r.Writes == 0 || r.Reads == 0 {
			c.Fatalf("%s%s", r.Summary(), problem(r.Problem))
		}
		c.Pass("%d writes of 4 KiB, %d read back and crc32c-verified, IOPS=%.0f in %d s", r.Writes, r.Reads, r.IOPS, rt)
	})
	l.Check(t, "ext4", func(c *C) {
		if s.data == nil {
			s.data = random(8 << 20)
		}
		p := tempFile(c, "selftest-data", s.data)
		script := `set -e
mkdir -p /mnt/srp
mkfs.ext4 -q -F DEV
mount -t ext4 DEV /mnt/srp
cp DATA /mnt/srp/pattern
umount /mnt/srp
echo 3 >/proc/sys/vm/drop_caches
mount -t ext4 DEV /mnt/srp
cmp DATA /mnt/srp/pattern || { umount /mnt/srp; exit 1; }
umount /mnt/srp
e2fsck -f -n DEV`
		if o := l.Sh(strings.NewReplacer("DEV", s.dev, "DATA", p).Replace(script)); !o.OK() {
			c.Fatalf("exit %d: %s", o.Code, lastLine(o))
		}
		c.Pass("mkfs, 8 MiB file, remount, contents equal, e2fsck clean")
	})
	l.Check(t, "srp session ipv4", func(c *C) {
		if errs := TransportErrors(s.kmark); len(errs) > 0 {
			l.Printf("%s", strings.Join(errs, "\n"))
			c.Fatalf("%s", ErrorsSummary(errs))
		}
		c.Pass("no transport errors or reconnects")
	})
	l.Check(t, "srp logout ipv4", func(c *C) {
		if err := l.Logout(); err != nil {
			c.Fatal(err)
		}
		c.Pass("disk removed")
	})
}

func (s *selfTest) ipv6(t *testing.T) {
	l := s.lab
	l.Check(t, "srp login ipv6", func(c *C) {
		r := s.needRXE(c)
		s.login(c, fmt.Sprintf("[%s]:%d", r.IP6, s.port))
		c.Equal(lioInqID, s.inqID(s.dev))
	})
	l.Check(t, "ipv6 e2fsck", func(c *C) {
		if o := l.Run("e2fsck", "-f", "-n", s.dev); !o.OK() {
			c.Fatalf("exit %d: %s", o.Code, lastLine(o))
		}
		c.Pass("ext4 written over IPv4 is clean")
	})
	l.Check(t, "srp logout ipv6", func(c *C) {
		if err := l.Logout(); err != nil {
			c.Fatal(err)
		}
		c.Pass("disk removed")
	})
}
