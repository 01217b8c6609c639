package srp_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/faultstore"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// TestLogicalUnitStats checks the per-logical-unit counters the channels keep
// (scsi.LogicalUnit.Stats): commands and latencies by class, bytes each way, and CHECK
// CONDITIONs by sense key, after known I/O; a logical unit nobody used stays at zero.
func TestLogicalUnitStats(t *testing.T) {
	lu, idle, m := faultyAndIdleLUs(t, "stats0001", "stats0002")

	h := newHarness(t, harnessOpts{auth: srp.AllowAll(m), latency: true})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	ctx := ctxT(t)
	testutil.WaitFor(t, "the unit attention's command to end", func() bool { return lu.StatsSnapshot().InFlight == 0 })
	before := lu.StatsSnapshot()

	const writes, reads, blocks = 5, 7, 8
	for i := 0; i < writes; i++ {
		mustWrite(t, ch, 0, uint32(i*blocks), testutil.Pattern(blocks*testBlockSize, i))
	}
	for i := 0; i < reads; i++ {
		mustRead(t, ch, 0, uint32(i*blocks), blocks)
	}
	// MEDIUM ERROR (a read), ILLEGAL REQUEST (an unsupported operation code: "other").
	rsp, err := ch.Read10(ctx, 0, badLBA, 1, testBlockSize)
	require.NoError(t, err)
	k, _, _ := senseOf(t, rsp)
	require.Equal(t, uint8(scsi.SenseMediumError), k)
	rsp, err = ch.Do(ctx, &srptest.Request{CDB: []byte{0xFF, 0, 0, 0, 0, 0}})
	require.NoError(t, err)
	k, _, _ = senseOf(t, rsp)
	require.Equal(t, uint8(scsi.SenseIllegalRequest), k)

	// The counters are updated when the response is posted, which the target may finish
	// after the initiator has the response.
	testutil.WaitFor(t, "every command to end", func() bool {
		s := lu.StatsSnapshot()
		return s.InFlight == 0 && s.Commands[scsi.OpOther]-before.Commands[scsi.OpOther] == 1
	})
	after := lu.StatsSnapshot()
	require.Equal(t, uint64(writes), after.Commands[scsi.OpWrite]-before.Commands[scsi.OpWrite])
	require.Equal(t, uint64(reads+1), after.Commands[scsi.OpRead]-before.Commands[scsi.OpRead])
	for class := range scsi.NumOpClasses {
		require.Equal(t, after.Commands[class], after.Latency[class].Count, "histogram count of %v", class)
		require.Equal(t, after.Commands[class]-before.Commands[class], after.Latency[class].Count-before.Latency[class].Count)
	}
	require.Positive(t, after.Latency[scsi.OpRead].SumNanos, "latency measured")
	require.Equal(t, uint64(writes*blocks*testBlockSize), after.BytesOut-before.BytesOut)
	require.Equal(t, uint64(reads*blocks*testBlockSize), after.BytesIn-before.BytesIn)
	require.Equal(t, uint64(1), after.SenseKeys[scsi.SenseMediumError]-before.SenseKeys[scsi.SenseMediumError])
	require.Equal(t, uint64(1), after.SenseKeys[scsi.SenseIllegalRequest]-before.SenseKeys[scsi.SenseIllegalRequest])
	require.Equal(t, scsi.LUStatsSnapshot{}, idle.StatsSnapshot(), "LUN 1 saw no command")
}

// TestTaskManagementStatsByFunction checks Stats.TaskMgmtByFunc.
func TestTaskManagementStatsByFunction(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ch := h.login(h.cfg())
	ctx := ctxT(t)
	for _, fn := range []iu.TskMgmtFunc{iu.TskAbortTask, iu.TskLUNReset, iu.TskLUNReset} {
		_, err := ch.TaskMgmt(ctx, fn, 0, 0x1234)
		require.NoError(t, err)
	}
	st := h.waitStats("three task management functions", func(s srp.Stats) bool { return s.TaskMgmt == 3 })
	want := [len(srp.TaskMgmtFuncs) + 1]uint64{}
	want[0], want[3] = 1, 2 // ABORT TASK, LOGICAL UNIT RESET
	require.Equal(t, want, st.TaskMgmtByFunc)
	require.Equal(t, iu.TskLUNReset, srp.TaskMgmtFuncs[3])
	require.Positive(t, st.PoolSize)
}

func mustMemory(t *testing.T) backstore.Backstore {
	t.Helper()
	m, err := backstore.NewMemory(testLUNSize, testBlockSize)
	require.NoError(t, err)
	return m
}

// badLBA is the block that faultyAndIdleLUs' first logical unit fails to read (MEDIUM ERROR).
const badLBA = 1000

// faultyAndIdleLUs makes two memory logical units, serials serial0 and serial1, mapped at LUNs
// 0 and 1; reading block badLBA of LUN 0 fails with EIO.
func faultyAndIdleLUs(t *testing.T, serial0, serial1 string) (lu0, lu1 *scsi.LogicalUnit, m *scsi.LUNMap) {
	t.Helper()
	faulty := faultstore.New(mustMemory(t))
	faulty.Inject(faultstore.OpRead, badLBA*testBlockSize, testBlockSize, syscall.EIO)
	var err error
	lu0, err = scsi.NewLogicalUnit(scsi.Config{Backstore: faulty, Serial: serial0})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lu0.Close() })
	lu1, err = scsi.NewLogicalUnit(scsi.Config{Backstore: mustMemory(t), Serial: serial1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lu1.Close() })
	m, err = scsi.NewLUNMap([]scsi.Mapping{{LUN: 0, LU: lu0}, {LUN: 1, LU: lu1}})
	require.NoError(t, err)
	return lu0, lu1, m
}

// TestLogicalUnitStatsWithoutLatency: without Config.MeasureLatency the commands are still
// counted, with no clock read (latency 0).
func TestLogicalUnitStatsWithoutLatency(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	lu := h.lus[0]
	testutil.WaitFor(t, "the unit attention's command to end", func() bool { return lu.StatsSnapshot().InFlight == 0 })
	before := lu.StatsSnapshot()
	for i := range 3 {
		mustRead(t, ch, 0, uint32(i*8), 8)
	}
	testutil.WaitFor(t, "the reads counted", func() bool {
		return lu.StatsSnapshot().Commands[scsi.OpRead]-before.Commands[scsi.OpRead] == 3
	})
	require.Zero(t, lu.StatsSnapshot().Latency[scsi.OpRead].SumNanos, "a clock was read")
}

// TestCommandEndsWhenAnswered: a channel in event mode is not woken by its responses' SEND
// completions (it reaps them with the next command), yet a command ends for its logical unit,
// counted and no longer holding it, as soon as its response is posted: an idle initiator must
// not keep a logical unit that a reload retires waiting. The initiator posts its receive
// buffer only once the response is posted, so that the SEND completes after the channel went
// to sleep.
func TestCommandEndsWhenAnswered(t *testing.T) {
	lu, err := scsi.NewLogicalUnit(scsi.Config{Backstore: mustMemory(t), Serial: "ends00001"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lu.Close() })
	m, err := scsi.NewLUNMap([]scsi.Mapping{{LUN: 0, LU: lu}})
	require.NoError(t, err)
	h := newHarness(t, harnessOpts{auth: srp.AllowAll(m),
		limits: srp.Limits{Completion: srp.CompletionEvent, RDMATimeout: time.Minute}})
	r := newRawConn(t, h, "198.19.5.1", 1)
	r.send(tur(1)) // its POWER ON unit attention takes the only receive buffer
	r.recv()
	// The response can arrive before the channel, right after posting it, counts the command
	// and releases the unit (memfabric delivers inside PostSend): counted first, then released.
	testutil.WaitFor(t, "the first command to end", func() bool { return lu.StatsSnapshot().InFlight == 0 })
	before := lu.StatsSnapshot()
	r.send(tur(2))
	testutil.WaitFor(t, "the response to be posted", func() bool {
		return lu.StatsSnapshot().Commands[scsi.OpOther] == before.Commands[scsi.OpOther]+1
	})
	r.postRecv(1)
	rsp := r.recv()
	require.Equal(t, byte(iu.OpRsp), rsp[0])
	testutil.WaitFor(t, "the command to stop holding its logical unit", func() bool { return lu.StatsSnapshot().InFlight == 0 })
	testutil.WaitFor(t, "no command in progress on the channel", func() bool {
		for _, s := range h.tgt.Sessions() {
			for _, c := range s.ChannelInfo {
				if c.InFlight != 0 {
					return false
				}
			}
		}
		return true
	})
	drained, err := lu.Retire(ctxT(t))
	require.NoError(t, err)
	require.True(t, drained, "retired without waiting for the channel's next wake-up")
}
