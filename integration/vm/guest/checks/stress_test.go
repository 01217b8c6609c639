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

// TestStress is the faults a SAN sees, against the daemon, with the data checked (make stress,
// make stress-quick: integration/vm/stress.sh). Every scenario moves data with fio
// --verify=crc32c --verify_fatal=1 and must end with no verify error, the daemon running (no
// panic or fatal error in its log), and its resources back where they were.
//
// Scenarios, in the order they run (instance = daemon process):
//   - instance 1, reference: one login and logout, then SIGQUIT: the number of goroutines of
//     an idle daemon that has served a session (the yardstick of the goroutine checks);
//   - instance 2 runs multiport, large, cycles, resets, reload and rejects in turn, and is then
//     SIGQUIT for its goroutines (each scenario is described at its function);
//   - instance 3, kill, and instance 4, devdel (not with quick=1);
//   - the last instance, hog.
//
// Bounds (per scenario, on a quiet daemon: no channel open): open files exactly back to their
// number; OS threads at most thread_slack (4) over the larger of the count before and the peak
// sampled while the scenario ran (the Go runtime keeps the threads it made for blocking calls);
// RSS at most rss_slack_mib (32 MiB) more: the daemon runs with GOGC=10 (daemon_gogc=), as its
// heap holds the 64 MiB buffer pool and the 64 MiB memory LUN, and with GOGC=100 garbage could
// grow by that much again; over the repeated part of cycles and rejects (from a quarter of the
// way to the end, at the same number of open channels) threads +repeat_thread_slack (2), RSS
// +repeat_rss_mib (8 MiB); goroutines at SIGQUIT, not counting the runtime's own, at most
// goroutine_slack (0) more than the reference.
//
// Arguments (k=v): quick=1 (the CI subset: multiport, large 4 MiB direct only, cycles=5,
// resets_secs=15, reloads=4, rejects=100, hog; no kill and devdel), cycles=20, resets_secs=30,
// reloads=10, rejects=1000, port=5555, port2=5556, only=LIST (comma separated scenario names:
// run only these), and the hog scenario's (stress_hog_test.go).
func TestStress(t *testing.T) {
	s := newStress(t)
	for _, step := range []func(*testing.T){s.setup, s.reference, s.instance2, s.others, s.end} {
		step(t)
	}
}

// others are the scenarios of instances of their own: kill and devdel (not with quick=1), hog.
func (s *stress) others(t *testing.T) {
	if !s.quick {
		s.scenario(t, "kill", "SIGKILL and restart while the initiator waits (file LUN)", s.kill)
		s.scenario(t, "devdel", "rdma link del / add under a live session", s.devdel)
	}
	s.scenario(t, "hog", "a misbehaving initiator holds pool buffers while ib_srp verifies", s.hog)
}

const (
	stressConfig = "/etc/srptarget-stress.yaml"
	stressDir    = "/tmp/stress"
	stressLUNs   = "/var/lib/srptarget-stress"
	stressL0MiB  = 64
	badExt       = "00000000deadbeef"
)

// thinned are the messages logged once per login, channel or task management function.
var thinned = []Msg{"login accepted", "login rejected", "closing channel", "channel closed",
	"last channel of the I_T nexus closed: nexus reset", "task management function done", "draining channel",
	"login with MULTI-CHANNEL ACTION single: terminating the nexus's channels", "RDMA device removed"}

type stress struct {
	lab                                 *Lab
	bin, config                         string
	rxe                                 *RXE
	port, port2                         int
	quick                               bool
	cycles, resetSecs, rejects, reloads int
	only                                []string
	bounds, repeat                      Bounds
	goroutineSlack                      int

	d        *Daemon // the current instance
	daemons  []*Daemon
	sampler  *Sampler
	stuck    int // channels an earlier check found never closed (one stuck channel fails one scenario)
	refGR    map[string]int
	scT0     time.Duration
	scKmark  int
	times    []string
	t0       time.Duration
	idExt    string // the target's identity: the node GUID of rxe0
	loginErr error
}

func newStress(t *testing.T) *stress {
	l := NewLab(t)
	s := &stress{lab: l, bin: l.Arg("bin", "/usr/local/bin/srptarget"), config: stressConfig,
		port: l.ArgInt("port", 5555), port2: l.ArgInt("port2", 5556), quick: l.Arg("quick", "0") == "1", t0: Uptime()}
	def := func(quick, full int) int {
		if s.quick {
			return quick
		}
		return full
	}
	s.cycles, s.resetSecs = l.ArgInt("cycles", def(5, 20)), l.ArgInt("resets_secs", def(15, 30))
	s.rejects, s.reloads = l.ArgInt("rejects", def(100, 1000)), l.ArgInt("reloads", def(4, 10))
	if o := l.Arg("only", ""); o != "" {
		s.only = strings.Split(o, ",")
	}
	s.bounds = Bounds{Threads: l.ArgInt("thread_slack", 4), RSSKiB: int64(l.ArgInt("rss_slack_mib", 32)) << 10}
	s.repeat = Bounds{Threads: l.ArgInt("repeat_thread_slack", 2), RSSKiB: int64(l.ArgInt("repeat_rss_mib", 8)) << 10}
	s.goroutineSlack = l.ArgInt("goroutine_slack", 0)
	return s
}

func (s *stress) want(name string) bool { return len(s.only) == 0 || slices.Contains(s.only, name) }

// stressYAML is the configuration: a memory LUN 0 and file LUNs 1-3; ACLs for ib_srp's default
// initiator_ext 0 (LUNs 0, 1) and the two initiator ports of the multiport scenario (2, 3).
const stressYAML = `# Generated by TestStress. Target identity: the node GUID of rxe0.
listeners:
  - address: "::"
    port: %[1]d
  - address: %[3]s
    port: %[2]d
limits:
  max_transfer_size: 8MiB
luns:
  - lun: 0
    backstore: memory
    size: %[5]dMiB
    thin_provisioning: false
    serial: stress0
  - lun: 1
    backstore: file
    path: %[4]s/lun1.img
    create: true
    size: 256MiB
    serial: stress1
  - lun: 2
    backstore: file
    path: %[4]s/lun2.img
    create: true
    size: 64MiB
    serial: stress2
  - lun: 3
    backstore: file
    path: %[4]s/lun3.img
    create: true
    size: 64MiB
    serial: stress3
acls:
  # ib_srp's default initiator_ext 0
  - initiators: ["0x0000000000000000*"]
    luns: [0, 1]
  # the two initiator ports of the multiport scenario
  - initiators: ["0x00000000000000a1*"]
    luns: [2]
  - initiators: ["0x00000000000000b2*"]
    luns: [3]
`

func (s *stress) setup(t *testing.T) {
	l := s.lab
	l.Step("srptarget binary")
	e := &e2e{lab: l, bin: s.bin}
	l.Check(t, "srptarget binary", e.checkBinary)
	l.Step("soft-RoCE")
	l.Check(t, "rxe", func(c *C) {
		s.rxe = l.MustRXE(c)
		s.idExt = s.rxe.GUID
		c.Pass("%s on %s, node GUID %s, %s", s.rxe.Name, s.rxe.Netdev, s.rxe.GUID, s.rxe.IP4)
	})
	// Only errors and worse on the console: reconnects and resets log a lot, and the kernel
	// log is printed per scenario anyway.
	Quiet("dmesg", "-n", "4")
	l.Step("configuration %s", s.config)
	l.Check(t, "srptarget validate", func(c *C) {
		for _, d := range []string{stressDir, stressLUNs} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				c.Abort("%v", err)
			}
		}
		for i := 1; i <= 3; i++ {
			os.Remove(fmt.Sprintf("%s/lun%d.img", stressLUNs, i))
		}
		cfg := fmt.Sprintf(stressYAML, s.port, s.port2, s.rxe.IP4, stressLUNs, stressL0MiB)
		if err := os.WriteFile(s.config, []byte(cfg), 0o644); err != nil {
			c.Abort("%v", err)
		}
		l.Printf("%s", cfg)
		o := l.Run(s.bin, "validate", "--config", s.config)
		if !o.OK() {
			c.Abort("srptarget validate: %s", lastLine(o))
		}
		c.Pass("%s", o.Lines()[0])
	})
	l.Printf("SRPTVM: quick=%v cycles=%d resets_secs=%d rejects=%d; bounds: threads +%d, fds +0, RSS +%d MiB; repeated part: threads +%d, RSS +%d MiB; goroutines +%d",
		s.quick, s.cycles, s.resetSecs, s.rejects, s.bounds.Threads, s.bounds.RSSKiB>>10, s.repeat.Threads, s.repeat.RSSKiB>>10, s.goroutineSlack)
}

// start starts a new instance with config and waits for both listeners.
func (s *stress) start(config string) error {
	if s.sampler != nil {
		s.sampler.Stop()
	}
	d, err := s.lab.Start(DaemonOptions{Bin: s.bin, N: len(s.daemons) + 1, Dir: stressDir + "/daemon",
		Env: []string{"GOGC=" + s.lab.Arg("daemon_gogc", "10"), "GOTRACEBACK=all"}, Args: []string{"--config", config}, Thin: thinned})
	if err != nil {
		return err
	}
	s.d, s.stuck = d, 0
	s.daemons = append(s.daemons, d)
	s.sampler = StartSampler(d.PID)
	if !WaitFor(30*time.Second, func() bool { return d.Alive() && CMListening(s.port) && CMListening(s.port2) }) {
		return fmt.Errorf("srptarget not listening on ports %d and %d after 30 s%s", s.port, s.port2, d.Gone())
	}
	return nil
}

// scenario runs one scenario as a subtest, with its kernel log and time after it.
func (s *stress) scenario(t *testing.T, name, what string, f func(t *testing.T)) {
	// the reference runs whatever only= says: the goroutine checks compare with it
	if name != "reference" && !s.want(name) {
		return
	}
	s.lab.Group(t, name, "scenario "+name+": "+what, func(t *testing.T) {
		s.scT0, s.scKmark = Uptime(), KMark()
		if len(RemotePorts()) > 0 {
			s.lab.Printf("SRPTVM: sessions left by the previous scenario: logging them out")
			s.lab.LogoutAll()
		}
		f(t)
		since := KSince(s.scKmark)
		s.lab.Printf("SRPTVM: ---- kernel log of %s (the first 30 lines, then up to 60 of errors, resets and reconnects)", name)
		s.lab.Printf("%s", strings.Join(since[:min(30, len(since))], "\n"))
		if len(since) > 30 {
			errs := Grep(since[30:], kernelNoise)
			s.lab.Printf("%s", strings.Join(errs[:min(60, len(errs))], "\n"))
		}
		took := Since(s.scT0)
		s.lab.Printf("SRPTVM: ---- %s took %s s", name, took)
		s.times = append(s.times, name+"="+took+"s")
	})
}

// loginWait logs in with opts (the target's identity, and dest= the first listener unless opts
// names one) and waits for exactly the LUNs luns; a failure is a row of its own, a success none.
func (s *stress) loginWait(t *testing.T, name, opts, luns string) (string, bool) {
	h, err := s.login(opts, luns)
	if err != nil {
		s.lab.Check(t, name, func(c *C) { c.Fatal(err) })
		return "", false
	}
	return h, true
}

// login is loginWait without the row.
func (s *stress) login(opts, luns string) (string, error) {
	o := fmt.Sprintf("id_ext=%s,ioc_guid=%s,%s", s.idExt, s.idExt, opts)
	if !strings.Contains(opts, "dest=") {
		o += fmt.Sprintf(",dest=%s:%d", s.rxe.IP4, s.port)
	}
	h, err := s.lab.LoginHost(s.rxe, o)
	if err != nil {
		return "", fmt.Errorf("add_target %s: %v", o, unwrapPath(err))
	}
	if !WaitFor(30*time.Second, func() bool { return HostLUNs(h) == luns }) {
		return h, fmt.Errorf("%s has LUNs '%s' 30 s after the login, want '%s'", h, HostLUNs(h), luns)
	}
	return h, nil
}

// openChannels are the channels the instance has open (srptarget stats), those an earlier
// check found stuck aside; -1 when it does not answer.
func (s *stress) openChannels() int {
	n, err := s.d.Stat("channels_open")
	if err != nil {
		return -1
	}
	return int(n) - s.stuck
}

// waitQuiet waits up to d for no channel open and at most fds open files, then a second for
// the Go runtime to settle its threads and the allocator.
func (s *stress) waitQuiet(d time.Duration, fds int) {
	WaitFor(d, func() bool { return s.openChannels() == 0 && ResourcesOf(s.d.PID).FDs <= fds })
	time.Sleep(time.Second)
}

// checkResources is a check that the instance holds no more than before (within b), every
// channel closed; t0 is the scenario's start for the peak of its threads, 0 for none.
func (s *stress) checkResources(t *testing.T, name string, before, after Resources, b Bounds, t0 time.Duration) {
	s.lab.Check(t, name, func(c *C) {
		peak, peakRSS := 0, int64(0)
		if t0 > 0 {
			peak, peakRSS = s.sampler.Peak(t0)
		}
		ok, detail := b.Within(before, after, peak)
		if t0 > 0 {
			detail += fmt.Sprintf(", peak while running %d threads, %.1f MiB", peak, float64(peakRSS)/1024)
			// after the scenario's logouts every channel must have closed
			if open := s.openChannels(); open != 0 {
				ok = false
				detail += fmt.Sprintf("; channels never closed: %d (srptarget stats)", open)
				s.stuck += max(open, 0)
				if ss, err := s.d.Sessions(); err == nil {
					s.lab.Printf("SRPTVM: sessions with channels still open: %+v", ss)
				}
			}
		}
		if !ok {
			c.Fatalf("%s; open files now: %s", detail, FDKinds(s.d.PID))
		}
		c.Pass("%s", detail)
	})
}

// checkDaemon is a check that the instance runs and logged no crash.
func (s *stress) checkDaemon(t *testing.T, name string) {
	s.lab.Check(t, name, func(c *C) {
		crashes := Crashes(readLines(s.d.LogPath))
		switch {
		case !s.d.Alive():
			c.Fatalf("exited%s %s", s.d.Gone(), strings.Join(crashes, "; "))
		case len(crashes) > 0:
			c.Fatalf("running, but: %s", strings.Join(crashes, "; "))
		}
		c.Pass("pid %d running, no panic or fatal error in its log", s.d.PID)
	})
}

// goroutines sends SIGQUIT (Go prints every goroutine and exits with status 2) and counts the
// goroutines by creator; the instance is gone afterwards.
func (s *stress) goroutines() (map[string]int, []string, error) {
	mark := s.d.LogMark()
	if err := s.d.Signal(syscall.SIGQUIT); err != nil {
		return nil, nil, err
	}
	if _, ok := s.d.WaitExit(20 * time.Second); !ok {
		return nil, nil, fmt.Errorf("daemon still running 20 s after SIGQUIT")
	}
	s.sampler.Stop()
	lines := readLines(s.d.LogPath)
	dump := lines[min(mark, len(lines)):]
	n := GoroutineCreators(dump)
	if Sum(n) == 0 {
		return nil, dump, fmt.Errorf("no goroutine of the daemon's in the SIGQUIT dump")
	}
	s.lab.Printf("SRPTVM: goroutines of instance %d at SIGQUIT: %d; by creator: %v", s.d.N, Sum(n), n)
	return n, dump, nil
}

// checkGoroutines is a check that SIGQUIT finds no more goroutines than the reference.
func (s *stress) checkGoroutines(t *testing.T, name string) {
	s.lab.Check(t, name, func(c *C) {
		if !s.d.Alive() {
			c.Fatalf("instance %d is not running%s", s.d.N, s.d.Gone())
		}
		n, _, err := s.goroutines()
		switch {
		case err != nil:
			c.Fatal(err)
		case s.refGR == nil:
			c.Fatalf("%d goroutines; no reference count to compare with", Sum(n))
		case Sum(n) > Sum(s.refGR)+s.goroutineSlack:
			c.Fatalf("%d goroutines at SIGQUIT, reference %d (bound +%d); by creator: %s", Sum(n), Sum(s.refGR), s.goroutineSlack, CreatorsDiff(s.refGR, n))
		}
		c.Pass("%d goroutines at SIGQUIT, reference %d (bound +%d); by creator: %s", Sum(n), Sum(s.refGR), s.goroutineSlack, CreatorsDiff(s.refGR, n))
	})
}

// reference: the goroutines of an idle daemon after one session.
func (s *stress) reference(t *testing.T) {
	s.scenario(t, "reference", "goroutines of an idle daemon after one session", func(t *testing.T) {
		if err := s.start(s.config); err != nil {
			s.lab.Check(t, "reference listening", func(c *C) { c.Abort("%v", err) })
			return
		}
		if h, ok := s.loginWait(t, "reference login", "ch_count=2", "0 1"); ok {
			if _, err := WritePattern(HostDev(h, 0), 0, 4); err != nil {
				s.lab.Printf("SRPTVM: %v", err)
			}
			_ = s.lab.LogoutHost(h)
		}
		WaitFor(20*time.Second, func() bool { return s.openChannels() == 0 })
		time.Sleep(2 * time.Second)
		ref := ResourcesOf(s.d.PID)
		s.lab.Printf("SRPTVM: reference resources: %s; open files: %s", ref, FDKinds(s.d.PID))
		s.lab.Check(t, "reference goroutines", func(c *C) {
			n, _, err := s.goroutines()
			if err != nil {
				c.Fatal(err)
			}
			s.refGR = n
			c.Pass("%d goroutines after one login/logout (%s before SIGQUIT)", Sum(n), ref)
		})
	})
}

// instance2 runs the scenarios of instance 2 after a warm-up: a session creates the buffer pool
// and the device context, and LUN 0 (memory, allocated as written) is filled so that later
// writes do not grow the RSS the checks look at.
func (s *stress) instance2(t *testing.T) {
	l := s.lab
	l.Step("srptarget instance 2: warm-up")
	if err := s.start(s.config); err != nil {
		l.Check(t, "instance 2 listening", func(c *C) { c.Abort("%v", err) })
		return
	}
	if h, ok := s.loginWait(t, "warm-up login", "ch_count=2", "0 1"); ok {
		r := l.Fio("--name=fill", "--filename="+HostDev(h, 0), "--direct=1", "--rw=write", "--bs=1M", "--iodepth=8",
			fmt.Sprintf("--size=%dM", stressL0MiB), "--verify=0")
		l.Printf("SRPTVM: LUN 0 filled: %s", r.Summary())
		_ = l.LogoutHost(h)
	}
	s.waitQuiet(20*time.Second, 1000)
	base := ResourcesOf(s.d.PID)
	l.Printf("SRPTVM: instance 2 after warm-up: %s; open files: %s", base, FDKinds(s.d.PID))
	s.scenario(t, "multiport", "two initiator ports, ch_count=4 each, own LUN maps", s.multiport)
	s.scenario(t, "large", "4 MiB / 8 MiB writes, cmd_sg_entries=255 and =1", s.large)
	s.scenario(t, "cycles", fmt.Sprintf("%d logout/login cycles under fio on dm-multipath", s.cycles), s.cyclesScenario)
	s.scenario(t, "resets", fmt.Sprintf("sg_reset -d / -b every second for %ds under fio", s.resetSecs), s.resets)
	s.scenario(t, "reload", fmt.Sprintf("%d configuration reloads under I/O", s.reloads), s.reload)
	s.scenario(t, "rejects", fmt.Sprintf("%d logins to refuse", s.rejects), s.rejectsScenario)
	l.Step("instance 2: goroutines")
	s.waitQuiet(20*time.Second, base.FDs)
	l.Printf("SRPTVM: instance 2 at the end: %s, after warm-up: %s; open files: %s", ResourcesOf(s.d.PID), base, FDKinds(s.d.PID))
	s.checkGoroutines(t, "goroutines after instance 2's scenarios")
}

// end: each instance's log by message, the samples, the kernel log, the times.
func (s *stress) end(t *testing.T) {
	l := s.lab
	l.Step("daemon logs")
	for _, d := range s.daemons {
		byMsg := map[string]int{}
		example := map[string]string{}
		lines := readLines(d.LogPath)
		for _, line := range lines {
			if ll, ok := ParseLogLine(line); ok {
				k := ll.Level + " " + ll.Msg
				if byMsg[k] == 0 {
					example[k] = line
				}
				byMsg[k]++
			}
		}
		l.Printf("SRPTVM: srptarget-%d.log: %d lines; by message: %v", d.N, len(lines), byMsg)
		for k, n := range byMsg {
			if strings.HasPrefix(k, "WARN ") || strings.HasPrefix(k, "ERROR ") {
				l.Printf("SRPTVM:   %dx %s  e.g. %s", n, k, example[k][:min(400, len(example[k]))])
			}
		}
		if c := Crashes(lines); len(c) > 0 {
			l.Printf("SRPTVM: srptarget-%d.log: %s", d.N, strings.Join(c, "; "))
		}
	}
	if s.sampler != nil {
		s.sampler.Stop()
		l.Printf("SRPTVM: the last instance's samples (threads, RSS every 0.5 s): %s", s.sampler.Summary())
	}
	l.Step("kernel log")
	l.Check(t, "kernel log", func(c *C) {
		if p := KernelProblems(); len(p) > 0 {
			l.Printf("SRPTVM: ---- each WARNING/BUG/Oops with the lines after it")
			l.Printf("%s", Dmesg())
		}
		c.CheckKernelLog()
	})
	l.Printf("SRPTVM: scenario times: %s; total %s s", strings.Join(s.times, " "), Since(s.t0))
}
