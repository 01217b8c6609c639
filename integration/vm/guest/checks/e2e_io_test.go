//go:build vmguest

package checks

import (
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fioRun is what the 4 KiB run measured around itself: the target QPs' send PSNs, /metrics'
// commands of LUN 0 and the disk's completed I/Os before and after, and the sessions the
// daemon listed during it.
type fioRun struct {
	qpBefore, qpAfter map[uint32]uint64
	cmds, hist, ios   [2]float64
	sessions          []Session
	sessErr           error
}

// fio: 4 KiB random writes at QD 32 over both channels, /metrics and sessions against what
// the disk did, 128 KiB sequential writes, and the session free of transport errors.
func (s *e2e) fio(t *testing.T) {
	l := s.lab
	l.Group(t, "fio", "fio: 4 KiB random writes, iodepth 32, one job per CPU, on LUN 0", func(t *testing.T) {
		mark := KMark()
		l.Check(t, "fio 4k randwrite qd32", s.checkFio4k)
		// The soft-RoCE FRWR race (README) is a bug of the initiator's own memory registration
		// in rdma_rxe 6.1: its QP fails a REG_MR, ib_srp reconnects (new QPs, so the channel
		// check cannot compare), fio goes on after the reconnect. When it hits this run, the run
		// is repeated once on the new session, and the session check requires the repeat to be
		// clean.
		if FRWRRace(KSince(mark)) {
			l.Printf("SRPTVM: the soft-RoCE FRWR race hit the 4 KiB run (rdma_rxe: rxe_reg_fast_mr ... not free; ib_srp reconnected): running it once more")
			WaitFor(30*time.Second, func() bool { return RportState() == "running" })
			s.frwrRetry = KMark()
			l.Check(t, "fio 4k randwrite qd32 (again, after the soft-RoCE FRWR race)", s.checkFio4k)
		}
		l.Check(t, "both channels used", s.checkBothChannels)
		l.Check(t, "metrics: LUN 0 commands", s.checkMetrics)
		l.Check(t, "srptarget sessions --json", s.checkSessions)
	})
	l.Step("fio: 128 KiB sequential writes on LUN 1")
	l.Check(t, "fio 128k seq write", func(c *C) {
		s.needSession(c)
		s.checkFio(c, l.Fio("--direct=1", "--name=seq128k", "--filename="+s.dev[1], "--rw=write", "--bs=128k", "--iodepth=16", "--size=96M"))
	})
	l.Check(t, "srp session", func(c *C) {
		s.needSession(c)
		errs := TransportErrors(s.kmark)
		switch {
		case len(errs) == 0:
			c.Pass("no transport errors or reconnects")
		case s.frwrRetry >= 0 && len(TransportErrors(s.frwrRetry)) == 0:
			l.Printf("%s", strings.Join(errs, "\n"))
			c.Pass("none since the repeated 4 KiB run; before it, the initiator's soft-RoCE FRWR race (rdma_rxe 6.1 bug, README): %s", ErrorsSummary(errs))
		default:
			l.Printf("%s", strings.Join(errs, "\n"))
			c.Fatalf("%s", ErrorsSummary(errs))
		}
	})
}

// checkFio passes a fio run whose writes were all read back and verified.
func (s *e2e) checkFio(c *C, r FioResult) {
	if !r.Verified() {
		c.Fatalf("%s%s", r, s.d.Gone())
	}
	c.Pass("%s", r)
}

// checkFio4k is the 4 KiB run, one job per CPU so that both channels carry commands, with its
// measurements; the sessions are asked for half a second into it.
func (s *e2e) checkFio4k(c *C) {
	s.needSession(c)
	ncpu := runtime.NumCPU()
	m := &fioRun{}
	var err error
	m.cmds[0], m.hist[0], err = s.lun0Metrics()
	if err != nil {
		c.Fatal(err)
	}
	m.ios[0] = float64(DiskIOs(filepath.Base(s.dev[0])))
	m.qpBefore = s.qpPSNs()
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(500 * time.Millisecond)
		m.sessions, m.sessErr = s.d.Sessions()
	}()
	r := s.lab.Fio("--direct=1", "--name=rand4k", "--filename="+s.dev[0], "--rw=randwrite", "--bs=4k", "--iodepth=32",
		fmt.Sprint("--numjobs=", ncpu), fmt.Sprintf("--size=%dM", 64/ncpu), fmt.Sprintf("--offset_increment=%dM", 64/ncpu),
		fmt.Sprintf("--cpus_allowed=0-%d", ncpu-1), "--cpus_allowed_policy=split", "--io_size="+s.lab.Arg("small_io", "2M"))
	m.qpAfter = s.qpPSNs()
	<-done
	m.cmds[1], m.hist[1], err = s.lun0Metrics()
	if err != nil {
		c.Fatal(err)
	}
	m.ios[1] = float64(DiskIOs(filepath.Base(s.dev[0])))
	s.lab.Printf("target QPs (lqpn:sq-psn) before: %v; after: %v", m.qpBefore, m.qpAfter)
	s.io = m
	s.checkFio(c, r)
}

// lun0Metrics is LUN 0's read and write commands and its latency histogram's count (/metrics).
func (s *e2e) lun0Metrics() (cmds, hist float64, err error) {
	fams, err := Metrics(e2eMetrics)
	if err != nil {
		return 0, 0, err
	}
	for _, op := range []string{"read", "write"} {
		want := map[string]string{"lun": "0", "op": op}
		n, err := MetricSum(fams, "srptarget_lun_commands_total", want)
		if err != nil {
			return 0, 0, err
		}
		h, err := MetricSum(fams, "srptarget_lun_command_duration_seconds", want)
		if err != nil {
			return 0, 0, err
		}
		cmds, hist = cmds+n, hist+h
	}
	return cmds, hist, nil
}

var qpLine = regexp.MustCompile(`lqpn (\d+) .*sq-psn (\d+)`)

// qpPSNs are the send PSNs of the daemon's QPs by QP number (`rdma resource show qp`).
func (s *e2e) qpPSNs() map[uint32]uint64 {
	psns := map[uint32]uint64{}
	for _, line := range Quiet("rdma", "resource", "show", "qp").Lines() {
		if !strings.Contains(line, "comm "+filepath.Base(s.bin)) {
			continue
		}
		if m := qpLine.FindStringSubmatch(line); m != nil {
			qpn, _ := strconv.ParseUint(m[1], 10, 32)
			psns[uint32(qpn)], _ = strconv.ParseUint(m[2], 10, 64)
		}
	}
	return psns
}

// needIO is the 4 KiB run's measurements; the checks on them fail without it.
func (s *e2e) needIO(c *C) *fioRun {
	if s.io == nil {
		c.Fatalf("the 4 KiB run did not run (run the group E2E/fio)")
	}
	return s.io
}

// checkBothChannels: every target QP of the session sent responses during the run.
func (s *e2e) checkBothChannels(c *C) {
	m := s.needIO(c)
	moved := 0
	for qpn, after := range m.qpAfter {
		if before, ok := m.qpBefore[qpn]; ok && before != after {
			moved++
		}
	}
	if len(m.qpAfter) != 2 || moved != 2 {
		c.Fatalf("%d of %d target QPs sent during the run (%v -> %v)", moved, len(m.qpAfter), m.qpBefore, m.qpAfter)
	}
	c.Pass("the send PSNs of both target QPs advanced during the run (%v -> %v)", m.qpBefore, m.qpAfter)
}

// checkMetrics: LUN 0's read and write commands in /metrics grew by what the disk completed
// (fio's writes and verify reads, as the block layer sent them), within 1 %, and its latency
// histogram counted each.
func (s *e2e) checkMetrics(c *C) {
	m := s.needIO(c)
	dm, dh, dio := m.cmds[1]-m.cmds[0], m.hist[1]-m.hist[0], m.ios[1]-m.ios[0]
	if dio <= 0 || (dm-dio)*100 > dio || (dio-dm)*100 > dio || dh != dm {
		c.Fatalf("/metrics read+write commands +%.0f, histogram count +%.0f, the disk completed +%.0f", dm, dh, dio)
	}
	c.Pass("/metrics read+write commands +%.0f, the disk completed +%.0f (within 1 %%); latency histogram count +%.0f", dm, dio, dh)
}

// checkSessions: the session as the control socket showed it during the run: the initiator
// port id ib_srp logged in with (initiator_ext 0, then rxe0's port GUID) and its two channels,
// whose queue pair numbers are the target QPs the kernel lists.
func (s *e2e) checkSessions(c *C) {
	m := s.needIO(c)
	if m.sessErr != nil {
		c.Fatal(m.sessErr)
	}
	want := "0x0000000000000000" + s.rxe.GUID
	var ids []string
	var qpns, wantQPNs []uint32
	for _, ss := range m.sessions {
		ids = append(ids, ss.Initiator)
		for _, ch := range ss.Channels {
			qpns = append(qpns, ch.QPNum)
		}
	}
	for qpn := range m.qpAfter {
		wantQPNs = append(wantQPNs, qpn)
	}
	slices.Sort(qpns)
	slices.Sort(wantQPNs)
	if !slices.Equal(ids, []string{want}) || len(qpns) != 2 || !slices.Equal(qpns, wantQPNs) {
		c.Fatalf("initiators %v (want %s), channel QPs %v (want %v)", ids, want, qpns, wantQPNs)
	}
	c.Pass("during fio: initiator %s with 2 channels, QPs %v (as rdma resource lists them)", want, qpns)
}
