//go:build vmguest

package checks

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// hog, the last instance: a misbehaving initiator against the shared data-buffer pool.
// srpflood (integration/vm/tools/srpflood) logs in on the second listener from a second address
// of the guest (hog_source, another host as far as the target can tell) as initiator port ext
// f1 with RNR retry 7, as ib_srp does, on hog_channels channels (4), posts no receive buffer
// and sends hog_commands READ(10) of 8 MiB on each (32, more than the trickle lets through in
// rdma_timeout); then it trickles: one receive buffer per channel every hog_trickle (500ms), a
// new READ for each response, so that every channel completes something now and then while its
// commands keep pool buffers. Meanwhile ib_srp on the first listener writes and verifies 64 KiB
// blocks on LUN 0 (above max_imm_data: they need a pool buffer, as the verify reads do). Pass:
// 0 verify errors, the victim's disk never goes longer than rdma_timeout (hog_rdma_timeout,
// 10s; empty: the daemon's 30s) + 5 s without completing an I/O (sampled every 0.25 s), the
// daemon logs a WARN line for each of srpflood's channels saying it closed it as stalled (its
// oldest work request older than rdma_timeout), srpflood sees every channel disconnected
// (it would hold it hog_secs, the timeout + 15 s), and the goroutines are back to the
// reference. hog_max_initiator_buffer= sets limits.max_initiator_buffer (the daemon's 25% of
// the pool by default; 100% leaves the victim only the stall watchdog); hog_channels=1
// hog_trickle=0s is a single channel that never receives.
func (s *stress) hog(t *testing.T) {
	l := s.lab
	h := newHog(s)
	cfg, err := os.ReadFile(s.config)
	add := ""
	if h.timeout != "" {
		add += "\n  rdma_timeout: " + h.timeout
	}
	if b := l.Arg("hog_max_initiator_buffer", ""); b != "" {
		add += fmt.Sprintf("\n  max_initiator_buffer: %q", b)
	}
	hogCfg := strings.Replace(string(cfg), "  max_transfer_size: 8MiB\n", "  max_transfer_size: 8MiB"+add+"\n", 1) +
		fmt.Sprintf("  # srpflood (the hog scenario)\n  - initiators: [\"0x%s*\"]\n    luns: [3]\n", h.ext)
	file := stressDir + "/hog.yaml"
	if err == nil {
		err = os.WriteFile(file, []byte(hogCfg), 0o644)
	}
	l.Printf("SRPTVM: %s: rdma_timeout %s; bound on the victim's stall %v; srpflood holds up to %ds with %s commands",
		file, h.timeout, h.bound, h.secs, h.commands)
	added := false
	if !strings.Contains(Quiet("ip", "-o", "addr", "show", "dev", s.rxe.Netdev).Text, " "+h.source+"/") {
		added = l.Run("ip", "addr", "add", h.source+"/16", "dev", s.rxe.Netdev).OK()
	}
	if _, e := os.Stat("/usr/local/bin/srpflood"); e != nil {
		l.Check(t, "hog: srpflood", func(c *C) { c.Fatalf("no srpflood in the guest: integration/vm/stress.sh builds it and passes it in") })
		return
	}
	if o := Quiet(s.bin, "validate", "--config", file); err != nil || !o.OK() {
		l.Check(t, "hog: configuration", func(c *C) { c.Fatalf("%v %s", err, o.Text) })
		return
	}
	if err := s.start(file); err != nil {
		l.Check(t, fmt.Sprintf("hog: instance %d listening", s.d.N), func(c *C) { c.Fatal(err) })
	} else if host, ok := s.loginWait(t, "hog: ib_srp login", "ch_count=2", "0 1"); ok {
		h.run(t, host)
		_ = l.LogoutHost(host)
	}
	WaitFor(30*time.Second, func() bool { return s.openChannels() == 0 })
	if added {
		l.Run("ip", "addr", "del", h.source+"/16", "dev", s.rxe.Netdev)
	}
	s.checkDaemon(t, "hog: daemon")
	s.checkGoroutines(t, "hog: goroutines")
}

type hog struct {
	s                           *stress
	ext, timeout, source        string
	channels, trickle, commands string
	secs                        int
	bound                       time.Duration
}

func newHog(s *stress) *hog {
	l := s.lab
	h := &hog{s: s, ext: "00000000000000f1", timeout: l.Arg("hog_rdma_timeout", "10s"), source: l.Arg("hog_source", "169.254.50.9"),
		channels: l.Arg("hog_channels", "4"), trickle: l.Arg("hog_trickle", "500ms"), commands: l.Arg("hog_commands", "32")}
	to, err := time.ParseDuration(h.timeout)
	if h.timeout == "" || err != nil {
		to = 30 * time.Second // the daemon's default
	}
	h.bound = to + 5*time.Second
	h.secs = l.ArgInt("hog_secs", int(to.Seconds())+15)
	return h
}

// completions samples a disk's completed I/Os every 0.25 s.
type completions struct {
	mu      sync.Mutex
	samples []ioSample
	stop    chan struct{}
}

type ioSample struct {
	at time.Duration
	n  int64
}

func sampleCompletions(disk string) *completions {
	c := &completions{stop: make(chan struct{})}
	go func() {
		for {
			n := DiskIOs(disk)
			c.mu.Lock()
			c.samples = append(c.samples, ioSample{Uptime(), n})
			c.mu.Unlock()
			select {
			case <-c.stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return c
}

// stall is the longest time in [from, to] in which the count did not change, and when.
func (c *completions) stall(from, to time.Duration) (longest, start, end time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last time.Duration
	var n int64 = -1
	for _, x := range c.samples {
		if x.at < from || x.at > to {
			continue
		}
		if n < 0 || x.n != n {
			if n >= 0 && x.at-last > longest {
				longest, start, end = x.at-last, last, x.at
			}
			last, n = x.at, x.n
		} else if x.at-last > longest {
			longest, start, end = x.at-last, last, x.at
		}
	}
	return
}

// count is the I/Os completed between two uptimes.
func (c *completions) count(from, to time.Duration) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	first, last := int64(-1), int64(0)
	for _, x := range c.samples {
		if x.at >= from && x.at <= to {
			if first < 0 {
				first = x.n
			}
			last = x.n
		}
	}
	return max(last-first, 0)
}

// flood is srpflood's account, its lines with the guest uptime.
type flood struct {
	code                 int
	logins               int
	login, completed     string
	sent, end            map[string]string
	tSent, tEnd, started time.Duration
}

// kv reads "key=value key=value" words.
func kv(s string) map[string]string {
	m := map[string]string{}
	for _, w := range strings.Fields(s) {
		if k, v, ok := strings.Cut(w, "="); ok {
			m[k] = v
		}
	}
	return m
}

// srpflood runs srpflood against the second listener and reads its account.
func (h *hog) srpflood() flood {
	s, l := h.s, h.s.lab
	args := []string{"-target", fmt.Sprintf("%s:%d", s.rxe.IP4, s.port2), "-id-ext", s.idExt, "-ioc-guid", s.idExt,
		"-initiator-ext", h.ext, "-lun", "3", "-commands", h.commands, "-size", "8MiB", "-duration", fmt.Sprintf("%ds", h.secs),
		"-channels", h.channels, "-trickle", h.trickle}
	if h.source != "" {
		args = append(args, "-source", h.source)
	}
	l.Printf("SRPTVM$ srpflood %s", strings.Join(args, " "))
	f := flood{started: Uptime(), code: -1}
	cmd := exec.Command("srpflood", args...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		l.Printf("SRPTVM: srpflood: %v", err)
		return f
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(time.Duration(h.secs+60) * time.Second)
	for open := true; open; {
		select {
		case line, ok := <-lines:
			if !ok {
				open = false
				continue
			}
			now := Uptime()
			l.Printf("srpflood| %.2f %s", now.Seconds(), line)
			f.read(line, now)
		case <-deadline:
			_ = cmd.Process.Kill()
			l.Printf("SRPTVM: srpflood killed: still running %d s after it started", h.secs+60)
		}
	}
	if cmd.Wait() == nil {
		f.code = 0
	} else if cmd.ProcessState != nil {
		f.code = cmd.ProcessState.ExitCode()
	}
	return f
}

func (f *flood) read(line string, now time.Duration) {
	switch {
	case strings.HasPrefix(line, "SRPFLOOD login ok "):
		f.logins++
		if f.login == "" {
			f.login = strings.TrimPrefix(line, "SRPFLOOD login ok ")
		}
	case strings.HasPrefix(line, "SRPFLOOD sent ") && f.sent == nil:
		f.sent, f.tSent = kv(line), now
	case strings.HasPrefix(line, "SRPFLOOD send completions ") && f.completed == "":
		f.completed = strings.TrimPrefix(line, "SRPFLOOD send completions ")
	case strings.HasPrefix(line, "SRPFLOOD end ") && f.end == nil:
		f.end, f.tEnd = kv(line), now
	}
}

// run is the scenario on the ib_srp session host.
func (h *hog) run(t *testing.T, host string) {
	s, l := h.s, h.s.lab
	dev := HostDev(host, 0)
	disk := filepath.Base(dev)
	dmark := s.d.LogMark()
	samples := sampleCompletions(disk)
	fioSecs := 8 + h.secs + 10
	victim := l.startFio("--name=hogvictim", "--filename="+dev, "--direct=1", "--rw=randwrite", "--bs=64k", "--iodepth=8",
		"--size=32M", "--offset=0", "--verify_backlog=32", "--time_based", fmt.Sprintf("--runtime=%d", fioSecs))
	w0, _ := DiskWrites(disk)
	WaitFor(30*time.Second, func() bool { w, _ := DiskWrites(disk); return w > w0+16 })
	tIO := Uptime()
	time.Sleep(3 * time.Second)
	f := h.srpflood()
	time.Sleep(500 * time.Millisecond)
	r, ok := victim.wait(time.Duration(fioSecs+240) * time.Second)
	close(samples.stop)
	tFio := Uptime()
	l.Check(t, "hog: srpflood", func(c *C) {
		sendOK, sent := 0, 0
		fmt.Sscan(f.end["send_ok"], &sendOK)
		fmt.Sscan(f.sent["commands"], &sent)
		if f.code != 0 || f.end == nil || f.sent == nil || fmt.Sprint(f.logins) != h.channels || sendOK < sent {
			c.Fatalf("exit %d; %d logins; sent %v; end %v", f.code, f.logins, f.sent, f.end)
		}
		c.Pass("port %d, initiator ext %s, %d channels from %s: %s; %d READ(10) of 8 MiB to LUN 3 all received by the target (%s); %s responses taken by the trickle (one receive per channel every %s), each answered by a new READ; the target's RDMA WRITEs changed %s bytes of its buffers; ended by %s after %s s",
			s.port2, h.ext, f.logins, h.source, f.login, sent, f.completed, f.end["responses"], h.trickle, f.end["data_in_bytes"], f.end["reason"], f.end["after_s"])
	})
	l.Check(t, fmt.Sprintf("hog: fio verify on port %d", s.port), func(c *C) {
		if !ok || !r.Clean() || r.Writes == 0 || r.Reads == 0 {
			c.Fatalf("%s%s (ended: %v)", r.Summary(), problem(r.Problem), ok)
		}
		c.Pass("%s (64 KiB random writes, iodepth 8, %d s)", r.Summary(), fioSecs)
	})
	h.checkStall(t, samples, f, tIO, tFio, dmark)
	h.checkClosed(t, f, dmark)
}

// checkStall: the victim's longest time without a completed I/O, over the whole of fio's run
// once its I/O flowed.
func (h *hog) checkStall(t *testing.T, samples *completions, f flood, tIO, tFio time.Duration, dmark int) {
	s := h.s
	s.lab.Check(t, "hog: victim I/O stall", func(c *C) {
		longest, st, en := samples.stall(tIO, tFio)
		tSent, tEnd := f.tSent, f.tEnd
		if tSent == 0 {
			tSent = f.started
		}
		if tEnd == 0 {
			tEnd = tFio
		}
		errs := TransportErrors(s.scKmark)
		transport := "no transport errors"
		if len(errs) > 0 {
			transport = ErrorsSummary(errs)
		}
		// the daemon logs its BUSY answers per channel, with a count, at most every 10 s
		busy := 0
		for _, ln := range s.d.LogLines(MsgBusy, dmark) {
			var n int
			if _, err := fmt.Sscan(ln.Field("commands"), &n); err == nil && ln.Field("initiator") == "0x0000000000000000"+s.rxe.GUID {
				busy += n
			}
		}
		detail := fmt.Sprintf("longest time without a completed I/O %.1f s (%+.1f to %+.1f s from srpflood's commands); bound %v (rdma_timeout + 5); I/Os completed: %d in the %.1f s before srpflood's commands, %d in the %.1f s until srpflood ended (%s), %d in the %.1f s after; ib_srp: %s; daemon: %d BUSY answers to ib_srp logged",
			longest.Seconds(), (st - tSent).Seconds(), (en - tSent).Seconds(), h.bound, samples.count(tIO, tSent), (tSent - tIO).Seconds(),
			samples.count(tSent, tEnd), (tEnd - tSent).Seconds(), f.end["reason"], samples.count(tEnd, tFio), (tFio - tEnd).Seconds(), transport, busy)
		if longest > h.bound {
			c.Fatal(detail)
		}
		c.Pass("%s", detail)
	})
}

// checkClosed: the daemon's account, a WARN line of the stall watchdog for each of srpflood's
// channels, and srpflood disconnected by the target.
func (h *hog) checkClosed(t *testing.T, f flood, dmark int) {
	s := h.s
	s.lab.Check(t, "hog: daemon closed the stalled channels", func(c *C) {
		id := "0x" + h.ext + s.rxe.GUID
		var warns []LogLine
		for _, ln := range s.d.LogLines(MsgRDMAStalled, dmark) {
			if ln.Level == "WARN" && ln.Field("initiator") == id {
				warns = append(warns, ln)
			}
		}
		if len(warns) == 0 || fmt.Sprint(len(warns)) != h.channels || f.end["reason"] != "disconnected" {
			held := ""
			if f.end["reason"] == "duration" {
				held = ": it held the connection as long as it wanted"
			}
			c.Fatalf("%d of %s channels closed as stalled (WARN %q for %s in the log of instance %d); srpflood: %s after %s s%s",
				len(warns), h.channels, MsgRDMAStalled, id, s.d.N, f.end["reason"], f.end["after_s"], held)
		}
		c.Pass("%d WARN lines, the first: %s; srpflood's %s channels disconnected by the target %s s after its commands",
			len(warns), warns[0].Raw[:min(500, len(warns[0].Raw))], h.channels, f.end["after_s"])
	})
}
