package srp_test

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// Regression tests for attacks by one initiator on the others: each of them failed before
// the target bounded what a channel may hold and how long it may stall.

// stuckRead is an SRP_CMD READ(10) of blocks 512-byte blocks from LBA 0 into the attacker's
// memory mr.
func stuckRead(tag iu.Tag, mr ib.MR, blocks int) []byte {
	f := &iu.CmdFields{Tag: tag,
		CDB:    [16]byte{0x28, 0, 0, 0, 0, 0, 0, byte(blocks >> 8), byte(blocks)},
		DataIn: iu.DataBufFields{Format: iu.DescDirect, Direct: iu.DirectBufFields{VA: mr.Addr(), Key: mr.RKey(), Len: uint32(blocks * testBlockSize)}}}
	n, _ := iu.CmdLen(f)
	b := make([]byte, n)
	_, _ = iu.Cmd(b).Encode(f)
	return b
}

// TestSecStuckInitiatorCannotStarveOthers: an initiator that posts no receive buffers and
// sends large READs keeps the target's response SENDs in RNR retry for ever, each holding
// its data buffer. It may hold no more than its channel's share of the pool: another
// initiator's 4 KiB READ completes GOOD at once. After rdma_timeout its channel is closed
// and the buffers come back.
func TestSecStuckInitiatorCannotStarveOthers(t *testing.T) {
	const timeout = 2 * time.Second
	h := newHarness(t, harnessOpts{limits: srp.Limits{BufferPoolSize: 32 << 20, RDMATimeout: timeout}})
	victim := h.login(srptest.Config{Addr: h.addr, TargetPortID: testPortID, Source: netip.MustParseAddr("198.19.3.2")})
	clearUA(t, victim, 0)

	attacker := newRawConn(t, h, "198.19.3.1", 0)
	mem := make([]byte, 8<<20)
	mr, err := attacker.pd.RegisterMemory(mem, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	require.NoError(t, err)
	defer func() { _ = mr.Deregister() }()
	stalledAt := time.Now()
	for tag := iu.Tag(1); tag <= 8; tag++ {
		attacker.send(stuckRead(tag, mr, len(mem)/testBlockSize))
	}
	h.waitStats("the attacker's reads", func(s srp.Stats) bool { return s.Commands >= 8+2 })
	h.waitStats("the attacker holding buffers", func(s srp.Stats) bool { return s.PoolInUse >= 8<<20 })

	for round := range 3 {
		start := time.Now()
		rsp, err := victim.Read10(ctxT(t), 0, 0, 8, testBlockSize)
		require.NoError(t, err)
		require.True(t, rsp.Good(), "round %d: victim's READ: status %#x", round, rsp.Status)
		require.Less(t, time.Since(start), time.Second, "round %d: victim's READ took too long", round)
		require.Less(t, h.tgt.Stats().PoolInUse, int64(32<<20), "the attacker holds the whole pool")
	}
	require.Zero(t, h.tgt.Stats().RDMAStalls, "closed before rdma_timeout")

	h.waitStats("the stalled channel closed", func(s srp.Stats) bool { return s.RDMAStalls == 1 })
	require.GreaterOrEqual(t, time.Since(stalledAt), timeout, "closed before rdma_timeout")
	e, ok := h.logged("RDMA stalled: a work request outstanding for longer than rdma_timeout; closing the channel and aborting its commands")
	require.True(t, ok)
	require.Equal(t, zapcore.WarnLevel, e.Level)
	require.Contains(t, e.ContextMap()["src"], "198.19.3.1", "the log line names the initiator's address")
	h.waitStats("the attacker's buffers back", func(s srp.Stats) bool { return s.PoolInUse == 0 })
	rsp, err := victim.Read10(ctxT(t), 0, 0, 8, testBlockSize)
	require.NoError(t, err)
	require.True(t, rsp.Good())
}

// TestSecStuckInitiatorCannotBlockLUNReset: a command of the stuck initiator, its RDMA READ
// queued behind a response SEND that never goes, is claimed by another initiator's LOGICAL
// UNIT RESET. The reset completes within rdma_timeout (the stuck channel is closed), and the
// other initiator's next command runs.
func TestSecStuckInitiatorCannotBlockLUNReset(t *testing.T) {
	const timeout = time.Second
	h := newHarness(t, harnessOpts{limits: srp.Limits{RDMATimeout: timeout}})
	victim := h.login(srptest.Config{Addr: h.addr, TargetPortID: testPortID, Source: netip.MustParseAddr("198.19.4.2")})
	clearUA(t, victim, 0)
	base := h.tgt.Stats().Commands

	r := newRawConn(t, h, "198.19.4.1", 1)
	r.send(tur(1))
	require.Equal(t, iu.Tag(1), iu.Rsp(r.recv()).Tag()) // its only receive buffer is used up
	r.send(tur(2)[:20])                                 // answered at once: the SEND waits in RNR
	data := testutil.Pattern(4096, 5)
	dmr, err := r.pd.RegisterMemory(data, ib.AccessRemoteRead)
	require.NoError(t, err)
	defer func() { _ = dmr.Deregister() }()
	n, _ := iu.CmdLen(&iu.CmdFields{DataOut: iu.DataBufFields{Format: iu.DescDirect}})
	w := make([]byte, n)
	_, _ = iu.Cmd(w).Encode(&iu.CmdFields{Tag: 3, CDB: [16]byte{0x2A, 0, 0, 0, 0x10, 0, 0, 0, 8},
		DataOut: iu.DataBufFields{Format: iu.DescDirect, Direct: iu.DirectBufFields{VA: dmr.Addr(), Key: dmr.RKey(), Len: 4096}}})
	r.send(w)
	h.waitStats("the attacker's commands", func(s srp.Stats) bool { return s.Commands == base+3 })

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Second)
	defer cancel()
	code, err := victim.ResetLUN(ctx, 0)
	elapsed := time.Since(start)
	require.NoError(t, err, "the victim's LUN RESET did not complete within rdma_timeout + 1 s")
	require.Equal(t, uint8(iu.TskMgmtSuccess), code)
	require.LessOrEqual(t, elapsed, timeout+500*time.Millisecond)
	require.GreaterOrEqual(t, h.tgt.Stats().RDMAStalls, uint64(1), "the stuck channel was not closed")

	requireTURSense(t, victim, 0, []uint8{0x06, 0x29, 0x03}) // the reset's unit attention: the victim's channel is fine
	// The WRITE whose data was never fetched did not reach the medium.
	got, err := victim.Read10(ctxT(t), 0, 0x1000, 8, testBlockSize)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 4096), got.DataIn)
	h.waitIdle()
}

// TestSecSessionsForgotten: 1000 logins and logouts with distinct initiator port ids (free to
// forge) leave the heap within 10 MiB of where it was, and the target remembers at most
// max_sessions nexuses.
func TestSecSessionsForgotten(t *testing.T) {
	if testing.Short() {
		t.Skip("1000 logins: not in -short")
	}
	const maxSessions = 64
	h := newHarness(t, harnessOpts{limits: srp.Limits{MaxSessions: maxSessions}, logLevel: zapcore.WarnLevel})
	node, err := h.fab.NewNode(netip.MustParseAddr("198.19.5.1"))
	require.NoError(t, err)
	cycle := func(i int) {
		cfg := srptest.Config{Addr: h.addr, TargetPortID: testPortID, Node: node, QueueDepth: 8}
		cfg.InitiatorPortID[0], cfg.InitiatorPortID[1], cfg.InitiatorPortID[15] = 0xfe, byte(i>>8), byte(i)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ch, err := srptest.Login(ctx, h.fab, cfg)
		require.NoError(t, err, "login %d", i)
		require.NoError(t, ch.Logout())
		h.waitStats("the channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 0 })
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for i := range maxSessions { // the target at its bound of remembered sessions
		cycle(i)
	}
	before := heap()
	for i := range 1000 {
		cycle(maxSessions + i)
	}
	require.LessOrEqual(t, h.tgt.SessionCount(), maxSessions)
	// The last channel's poll group releases its device queues (SRQ buffers, CQs) and workers
	// after its pass, on its own goroutine: what a teardown still holds for a moment is not a
	// leak, so the bound is checked until it holds (a leak never lets it). 4 MiB: 4 KiB per
	// login, and less than one device's queues on memfabric (two 64 Ki-entry CQs, 8 MiB), which
	// a stale slot in a group's lists kept reachable with the dead channel.
	const bound = 4 << 20
	after := heap()
	for deadline := time.Now().Add(10 * time.Second); int64(after)-int64(before) >= bound && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		after = heap()
	}
	t.Logf("heap before %d, after %d bytes", before, after)
	require.Less(t, int64(after)-int64(before), int64(bound), "1000 logins kept %d bytes", int64(after)-int64(before))
}

// TestSecSpoofedLoginCannotSwapLUNs: a MULTI login from another address with the victim's
// (unauthenticated) initiator port id, which the ACL grants other LUNs, is refused; the
// victim's channel keeps its LUNs.
func TestSecSpoofedLoginCannotSwapLUNs(t *testing.T) {
	h := newHarness(t, harnessOpts{luns: 2})
	victimMap, err := scsi.NewLUNMap([]scsi.Mapping{{LUN: 0, LU: h.lus[0]}})
	require.NoError(t, err)
	otherMap, err := scsi.NewLUNMap([]scsi.Mapping{{LUN: 1, LU: h.lus[1]}})
	require.NoError(t, err)
	victimAddr, attackerAddr := netip.MustParseAddr("198.19.6.1"), netip.MustParseAddr("198.19.6.2")
	h.tgt.SetAuthorizer(srp.AuthorizerFunc(func(_, _ iu.PortID, src netip.AddrPort) (*scsi.LUNMap, error) {
		if src.Addr() == attackerAddr {
			return otherMap, nil
		}
		return victimMap, nil
	}))
	victim := h.login(srptest.Config{Addr: h.addr, TargetPortID: testPortID, Source: victimAddr})
	clearUA(t, victim, 0)

	spoof := srptest.Config{Addr: h.addr, TargetPortID: testPortID, Source: attackerAddr,
		InitiatorPortID: victim.Config().InitiatorPortID, MultiChannel: iu.MultiChanMulti}
	_, err = h.loginErr(spoof)
	var rej *srptest.LoginRejectedError
	require.True(t, errors.As(err, &rej), "spoofed login: %v", err)
	require.Equal(t, iu.LoginRejUnableAssociateChannel, rej.Reason)

	rsp, err := victim.TestUnitReady(ctxT(t), 0)
	require.NoError(t, err)
	require.True(t, rsp.Good(), "the victim lost LUN 0: %v", rsp.Err())
	rsp, err = victim.TestUnitReady(ctxT(t), 1)
	require.NoError(t, err)
	k, asc, _ := senseOf(t, rsp)
	require.Equal(t, []uint8{0x05, 0x25}, []uint8{k, asc}, "the victim sees the attacker's LUN 1")

	// A channel from the victim's own address still joins.
	same := spoof
	same.Source, same.Node = netip.Addr{}, victim.Node()
	ch := h.login(same)
	rsp, err = ch.TestUnitReady(ctxT(t), 0)
	require.NoError(t, err)
	require.True(t, rsp.Good(), "%v", rsp.Err())
}

// TestSecGlobalLimits: logins beyond max_sessions (all with channels), max_channels_total and
// max_logins_in_progress are refused with INSUFFICIENT RESOURCES; a session without channels
// makes room for a new one.
func TestSecGlobalLimits(t *testing.T) {
	id := func(i byte) iu.PortID { return iu.PortID{0xfe, 15: i} }
	cfgFor := func(h *harness, i byte) srptest.Config {
		return srptest.Config{Addr: h.addr, TargetPortID: testPortID, InitiatorPortID: id(i), QueueDepth: 8}
	}
	requireRefused := func(t *testing.T, err error) {
		t.Helper()
		var rej *srptest.LoginRejectedError
		require.True(t, errors.As(err, &rej), "login: %v", err)
		require.Equal(t, iu.LoginRejInsufficientResources, rej.Reason)
	}

	t.Run("max_sessions", func(t *testing.T) {
		h := newHarness(t, harnessOpts{limits: srp.Limits{MaxSessions: 2, MaxSessionsPerSource: 2}})
		a := h.login(cfgFor(h, 1))
		h.login(cfgFor(h, 2))
		_, err := h.loginErr(cfgFor(h, 3))
		requireRefused(t, err)
		require.NoError(t, a.Logout())
		// ChannelsClosed, not ChannelsOpen == 1: the second channel is counted open only
		// after its login response went out, which the initiator may see first.
		h.waitStats("a's channel closed", func(s srp.Stats) bool { return s.ChannelsClosed == 1 })
		h.login(cfgFor(h, 3)) // a's nexus is forgotten to make room
		require.Equal(t, 2, h.tgt.SessionCount())
	})
	t.Run("max_channels_total", func(t *testing.T) {
		h := newHarness(t, harnessOpts{limits: srp.Limits{MaxChannelsTotal: 3, MaxChannelsPerSource: 3}})
		h.loginMulti(cfgFor(h, 1), 2)
		h.login(cfgFor(h, 2))
		_, err := h.loginErr(cfgFor(h, 3))
		requireRefused(t, err)
	})
	t.Run("max_logins_in_progress", func(t *testing.T) {
		h := newHarness(t, harnessOpts{limits: srp.Limits{MaxLoginsInProgress: 1}})
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		h.tgt.SetAuthorizer(srp.AuthorizerFunc(func(init, _ iu.PortID, _ netip.AddrPort) (*scsi.LUNMap, error) {
			if init == id(1) {
				once.Do(func() { close(entered) })
				<-release
			}
			return h.lunMap, nil
		}))
		slow := make(chan error, 1)
		go func() { _, err := h.loginErr(cfgFor(h, 1)); slow <- err }()
		<-entered
		_, err := h.loginErr(cfgFor(h, 2))
		requireRefused(t, err)
		close(release)
		require.NoError(t, <-slow)
		// The slot is free again once the first handler has returned (just after its REP).
		testutil.WaitFor(t, "a login after the slow one", func() bool {
			_, err := h.loginErr(cfgFor(h, 2))
			return err == nil
		})
	})
}

// failingPD refuses every registration, as ibv_reg_mr does beyond RLIMIT_MEMLOCK.
type failingPD struct{}

func (failingPD) RegisterMemory([]byte, ib.Access) (ib.MR, error) {
	return nil, errors.New("ibv_reg_mr: cannot allocate memory")
}

// deviceListener is a listener bound to a device whose memory cannot be registered.
type deviceListener struct{ ib.Listener }

func (deviceListener) PD() (ib.ProtectionDomain, bool) { return failingPD{}, true }

// TestSecPrepareRegistersThePool: the buffer pool of a listener's device is registered before
// any login, and a host that cannot pin it learns so then, with the fix.
func TestSecPrepareRegistersThePool(t *testing.T) {
	h := newHarness(t, harnessOpts{noServe: true})
	require.NoError(t, h.tgt.Prepare(h.ln))
	_, ok := h.logged("registered data buffer pool")
	require.True(t, ok, "Prepare registered no pool")

	err := h.tgt.Prepare(deviceListener{h.ln})
	require.ErrorContains(t, err, "cannot allocate memory")
	require.ErrorContains(t, err, "LimitMEMLOCK")
	require.ErrorContains(t, err, "CAP_IPC_LOCK")
}

// TestSecRefusedCommandsLogRateLimited: an initiator that sends only commands the transport
// refuses gets each one answered, but the log gets at most 5 lines per 10 s of them.
func TestSecRefusedCommandsLogRateLimited(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ch := h.login(h.cfg())
	for i := range 20 {
		rsp, err := ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(0, 8), DataInLen: 4096, Attr: iu.TaskAttr(3)})
		require.NoError(t, err)
		k, asc, ascq := senseOf(t, rsp)
		require.Equal(t, []uint8{0x05, 0x0E, 0x03}, []uint8{k, asc, ascq}, "command %d", i) // INVALID FIELD IN COMMAND IU
	}
	require.Len(t, h.logs.FilterMessage("SRP_CMD refused").All(), 5)
	require.Equal(t, uint64(20), h.tgt.Stats().TransportErrors)
}

// TestSecRefusedLoginsLogRateLimited: a storm of refused logins from one address is refused
// every time, logged 5 times.
func TestSecRefusedLoginsLogRateLimited(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.tgt.SetAuthorizer(srp.AuthorizerFunc(func(iu.PortID, iu.PortID, netip.AddrPort) (*scsi.LUNMap, error) {
		return nil, srp.ErrNotAuthorized
	}))
	node, err := h.fab.NewNode(netip.MustParseAddr("198.19.8.1"))
	require.NoError(t, err)
	for i := range 12 {
		cfg := h.cfg()
		cfg.Node = node
		cfg.InitiatorPortID = iu.PortID{0xfc, 15: byte(i)} // every one a new identifier
		_, err := h.loginErr(cfg)
		var rej *srptest.LoginRejectedError
		require.True(t, errors.As(err, &rej), "login %d: %v", i, err)
	}
	require.Equal(t, uint64(12), h.tgt.Stats().LoginsRejected)
	require.Len(t, h.logs.FilterMessage("login rejected").All(), 5)
}
