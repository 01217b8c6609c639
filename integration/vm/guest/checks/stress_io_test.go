//go:build vmguest

package checks

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// multiport: two initiator ports (initiator_ext a1 and b2) logged in at once with ch_count=4
// each, each ACL its own LUN map: port a1 sees only LUN 2, port b2 only LUN 3 (neither has a
// LUN 0: Linux finds them by REPORT LUNS); fio on both at once.
func (s *stress) multiport(t *testing.T) {
	l := s.lab
	before := ResourcesOf(s.d.PID)
	ha, okA := s.loginWait(t, "multiport: login a1", "initiator_ext=00000000000000a1,ch_count=4", "2")
	hb, okB := s.loginWait(t, "multiport: login b2", "initiator_ext=00000000000000b2,ch_count=4", "3")
	if okA && okB {
		ida, idb := "0x00000000000000a1"+s.rxe.GUID, "0x00000000000000b2"+s.rxe.GUID
		l.Check(t, "multiport: 2 ports x 4 channels", func(c *C) {
			ss, err := s.d.Sessions()
			if err != nil {
				c.Fatal(err)
			}
			chs := map[string]int{}
			for _, x := range ss {
				chs[x.Initiator] = len(x.Channels)
			}
			ca, cb, open := HostAttr(ha, "ch_count"), HostAttr(hb, "ch_count"), s.openChannels()
			if ca != "4" || cb != "4" || chs[ida] != 4 || chs[idb] != 4 || open != 8 {
				c.Fatalf("ib_srp ch_count %s/%s; daemon (srptarget sessions, stats): %d channels for %s, %d for %s; open channels %d", ca, cb, chs[ida], ida, chs[idb], idb, open)
			}
			c.Pass("ib_srp ch_count 4 and 4; daemon (srptarget sessions, stats): 4 channels for %s, 4 for %s, 8 channels open", ida, idb)
		})
		da, db := HostDev(ha, 2), HostDev(hb, 3)
		l.Check(t, "multiport: LUN maps", func(c *C) {
			la := strings.Join(LUNList(Quiet("sg_luns", da).Text), " ")
			lb := strings.Join(LUNList(Quiet("sg_luns", db).Text), " ")
			if HostLUNs(ha) != "2" || HostLUNs(hb) != "3" || la != "0002000000000000" || lb != "0003000000000000" {
				c.Fatalf("port a1 (%s): LUNs '%s', REPORT LUNS '%s'; port b2 (%s): LUNs '%s', REPORT LUNS '%s'; want 2 and 3 only", ha, HostLUNs(ha), la, hb, HostLUNs(hb), lb)
			}
			c.Pass("port a1 (%s): disks for LUN 2, REPORT LUNS %s; port b2 (%s): LUN 3, REPORT LUNS %s", ha, la, hb, lb)
		})
		e := &e2e{lab: l, bin: s.bin}
		qb := e.qpPSNs()
		l.Check(t, "multiport: fio verify", func(c *C) {
			// Each job on a CPU of its own (split): the daemon's poll group keeps a CPU busy
			// while it polls, and the scheduler would otherwise put every job on the other one,
			// whose single hardware queue per port would then carry all the I/O.
			r := l.Fio("--direct=1", "--rw=randwrite", "--bs=4k", "--iodepth=16", "--size=16M", "--numjobs=2",
				"--offset_increment=16M", "--verify_backlog=64", fmt.Sprintf("--cpus_allowed=0-%d", runtime.NumCPU()-1),
				"--cpus_allowed_policy=split", "--name=porta", "--filename="+da, "--name=portb", "--filename="+db)
			s.checkFio(c, r, "both ports at once, 2 jobs per port, iodepth 16")
		})
		qa := e.qpPSNs()
		// blk-mq maps each CPU to one hardware queue (= ib_srp channel): with fewer CPUs than
		// channels only as many channels per port carry I/O.
		l.Check(t, "multiport: channels carrying I/O", func(c *C) {
			moved := 0
			for qpn, after := range qa {
				if before, ok := qb[qpn]; ok && before != after {
					moved++
				}
			}
			perPort := min(runtime.NumCPU(), 4)
			if len(qa) != 8 || moved < 2*perPort {
				c.Fatalf("%d of %d target QPs sent during fio, want >= %d of 8", moved, len(qa), 2*perPort)
			}
			c.Pass("%d of the 8 target QPs sent responses during fio (at least %d wanted: %d CPUs map to %d of each port's 4 queues)", moved, 2*perPort, runtime.NumCPU(), perPort)
		})
	}
	for _, h := range []string{ha, hb} {
		if h != "" {
			_ = l.LogoutHost(h)
		}
	}
	s.waitQuiet(20*time.Second, before.FDs)
	s.checkResources(t, "multiport: resources", before, ResourcesOf(s.d.PID), s.bounds, s.scT0)
	s.checkDaemon(t, "multiport: daemon")
}

// checkFio passes a run with writes and verify reads and no error (a write-only job, with
// --do_verify=0, no reads; a --verify_only job, reads only).
func (s *stress) checkFio(c *C, r FioResult, note string, args ...string) {
	job := " " + strings.Join(args, " ") + " "
	ok := r.Clean()
	switch {
	case strings.Contains(job, " --verify_only"):
		ok = ok && r.Reads > 0
	case strings.Contains(job, " --do_verify=0 "):
		ok = ok && r.Writes > 0
	default:
		ok = ok && r.Writes > 0 && r.Reads > 0
	}
	if !ok {
		c.Fatalf("%s%s", r.Summary(), problem(r.Problem))
	}
	if note != "" {
		note = "; " + note
	}
	c.Pass("%s%s", r.Summary(), note)
}

// fioCheck runs fio and checks it (checkFio).
func (s *stress) fioCheck(t *testing.T, name, note string, args ...string) bool {
	return s.lab.Check(t, name, func(c *C) { s.checkFio(c, s.lab.Fio(args...), note, args...) })
}

// large: 4 MiB and 8 MiB writes, direct and buffered, with cmd_sg_entries=255 (descriptor
// table inside SRP_CMD) and cmd_sg_entries=1 + allow_ext_sg=1 (external table the target
// fetches with RDMA READ), max_sect=16384, as blktests srp/005-010. Buffered writes are read
// back with O_DIRECT after dropping the page cache (fio --verify_only), so the target's data is
// what is checked. The disk's write counters (/sys/block/sdX/stat) count the requests, each one
// SRP_CMD: at least 3/4 of the direct writes must go out whole.
func (s *stress) large(t *testing.T) {
	l := s.lab
	before := ResourcesOf(s.d.PID)
	sizes, modes := []int{4}, []string{"direct"}
	if !s.quick {
		sizes, modes = []int{4, 8}, []string{"direct", "buffered"}
	}
	for _, sg := range []int{255, 1} {
		opts := fmt.Sprintf("ch_count=1,queue_size=32,max_cmd_per_lun=32,max_sect=16384,cmd_sg_entries=%d,sg_tablesize=2048", sg)
		if sg == 1 {
			opts += ",allow_ext_sg=1"
		}
		h, ok := s.loginWait(t, fmt.Sprintf("large: login cmd_sg_entries=%d", sg), opts, "0 1")
		if !ok {
			continue
		}
		dev := HostDev(h, 0)
		d := filepath.Base(dev)
		hw := 0
		fmt.Sscan(readTrim("/sys/block/"+d+"/queue/max_hw_sectors_kb"), &hw)
		_ = l.Write("/sys/block/"+d+"/queue/max_sectors_kb", fmt.Sprint(min(hw, 8192)))
		for _, mib := range sizes {
			for _, mode := range modes {
				s.largeRun(t, dev, mib, mode, sg)
			}
		}
		_ = l.LogoutHost(h)
	}
	s.waitQuiet(20*time.Second, before.FDs)
	s.checkResources(t, "large: resources", before, ResourcesOf(s.d.PID), s.bounds, s.scT0)
	s.checkDaemon(t, "large: daemon")
}

// largeRun is one size and mode of large.
func (s *stress) largeRun(t *testing.T, dev string, mib int, mode string, sg int) {
	l := s.lab
	l.Check(t, fmt.Sprintf("large: %dM %s cmd_sg_entries=%d", mib, mode, sg), func(c *C) {
		// The disk's write counters, not a block tracepoint: enabling a trace event patches
		// kernel text on every CPU, which a check should not do in the middle of RDMA traffic.
		disk := filepath.Base(dev)
		ios0, secs0 := DiskWrites(disk)
		common := []string{fmt.Sprintf("--name=large%dM", mib), "--filename=" + dev, "--rw=randwrite", fmt.Sprintf("--bs=%dM", mib),
			"--iodepth=4", "--size=64M", "--sync=1"}
		var w FioResult
		if mode == "direct" {
			w = l.Fio(append(common, "--direct=1")...)
		} else {
			w = l.Fio(append(common, "--direct=0", "--do_verify=0", "--end_fsync=1")...)
		}
		ios1, secs1 := DiskWrites(disk)
		cmds, kib := ios1-ios0, (secs1-secs0)/2
		detail := fmt.Sprintf("%s; %s: %d WRITE commands, %d KiB", w.Summary(), disk, cmds, kib)
		r := w
		if mode == "buffered" {
			// read back what reached the target, not the page cache
			Quiet("sync")
			_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200)
			Quiet("blockdev", "--flushbufs", dev)
			r = l.Fio(append(common, "--direct=1", "--verify_only")...)
			detail += "; read back after dropping the page cache: " + r.Summary()
		}
		switch {
		case !w.Clean() || !r.Clean() || w.Writes == 0 || r.Reads == 0:
			c.Fatalf("%s%s%s", detail, problem(w.Problem), problem(r.Problem))
		// direct: most of fio's writes must go out whole, as one SRP_CMD each (the block layer
		// may still split one now and then; each split adds at least one command, so at most
		// cmds-writes were split); buffered: writeback decides the sizes
		case mode == "direct" && (kib != w.Writes*int64(mib)<<10 || (cmds-w.Writes)*4 > w.Writes):
			c.Fatalf("%s; want the %d writes' %d KiB in at most %d commands (3/4 of them whole)",
				detail, w.Writes, w.Writes*int64(mib)<<10, w.Writes+w.Writes/4)
		}
		c.Pass("%s", detail)
	})
}
