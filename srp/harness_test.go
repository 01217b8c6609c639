package srp_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/gatestore"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// testPortID is the target port identifier of the test target: id_ext = ioc_guid, as LIO
// requires for its own.
var testPortID = iu.PortID{0x00, 0x02, 0xc9, 0x03, 0x00, 0xa3, 0x42, 0x70, 0x00, 0x02, 0xc9, 0x03, 0x00, 0xa3, 0x42, 0x70}

const (
	testBlockSize = 512
	testLUNSize   = 64 << 20
	testPort      = 5555
)

var targetAddr = netip.MustParseAddr("192.0.2.1")

// harness is a target serving memory (or file) LUNs on an in-memory fabric.
type harness struct {
	t        testing.TB
	fab      *memfabric.Fabric
	node     *memfabric.Node
	ln       ib.Listener
	tgt      *srp.Target
	addr     netip.AddrPort
	lus      []*scsi.LogicalUnit
	lunMap   *scsi.LUNMap
	logs     *observer.ObservedLogs
	serveErr chan error
	closed   bool
	gate     *gateStore
}

type harnessOpts struct {
	limits    srp.Limits
	fabric    memfabric.Options
	luns      int
	fileLUN   bool // LUN 0 on a file backstore
	nullLUN   bool // LUN 0 on a null backstore
	lunSize   int64
	auth      srp.Authorizer // nil: every initiator sees all LUNs
	noServe   bool
	logLevel  zapcore.Level
	targetPID *iu.PortID
	gate      bool // LUN 0's backstore can be held (h.gate)
	latency   bool // srp.Config.MeasureLatency
	// targetPort and morePorts are srp.Config.TargetPort and MorePorts.
	targetPort *scsi.TargetPort
	morePorts  []srp.Port
	// lun0, when set, is LUN 0's backstore (a benchmark's file).
	lun0 backstore.Backstore
}

// gateStore is the harness's view of a gatestore.Store, in the words the tests of this package
// use: hold and release for Hold and Release, entered for Entered.
type gateStore struct {
	*gatestore.Store
	entered *atomic.Int32 // operations that reached the store since hold
}

func newGateStore(inner backstore.Backstore) *gateStore {
	g := gatestore.New(inner)
	return &gateStore{Store: g, entered: &g.Entered}
}

// hold makes later operations wait until release (gatestore.Store.Hold).
func (g *gateStore) hold() { g.Hold() }

// release lets waiting and later operations through.
func (g *gateStore) release() { g.Release() }

// newHarness starts a target with opts.luns memory LUNs (default 1).
func newHarness(t testing.TB, opts harnessOpts) *harness {
	t.Helper()
	if opts.luns == 0 {
		opts.luns = 1
	}
	if opts.lunSize == 0 {
		opts.lunSize = testLUNSize
	}
	if opts.limits.BufferPoolSize == 0 {
		opts.limits.BufferPoolSize = 32 << 20
	}
	h := &harness{t: t, fab: memfabric.New(opts.fabric), serveErr: make(chan error, 1)}
	var err error
	h.node, err = h.fab.NewNode(targetAddr)
	require.NoError(t, err)
	var maps []scsi.Mapping
	for i := 0; i < opts.luns; i++ {
		var bs backstore.Backstore
		switch {
		case i == 0 && opts.lun0 != nil:
			bs = opts.lun0
		case i == 0 && opts.fileLUN:
			f, err := backstore.OpenFile(filepath.Join(t.TempDir(), "lun0.img"),
				backstore.FileOptions{Size: opts.lunSize, Create: true, LogicalBlockSize: testBlockSize})
			require.NoError(t, err)
			bs = f
		case i == 0 && opts.nullLUN:
			n, err := backstore.NewNull(opts.lunSize, testBlockSize)
			require.NoError(t, err)
			bs = n
		default:
			m, err := backstore.NewMemory(opts.lunSize, testBlockSize)
			require.NoError(t, err)
			bs = m
		}
		if i == 0 && opts.gate {
			h.gate = newGateStore(bs)
			bs = h.gate
		}
		lu, err := scsi.NewLogicalUnit(scsi.Config{Backstore: bs, Serial: fmt.Sprintf("srptest%04d", i), WriteCache: true})
		require.NoError(t, err)
		h.lus = append(h.lus, lu)
		maps = append(maps, scsi.Mapping{LUN: uint16(i), LU: lu})
	}
	h.lunMap, err = scsi.NewLUNMap(maps)
	require.NoError(t, err)
	auth := opts.auth
	if auth == nil {
		auth = srp.AllowAll(h.lunMap)
	}
	level := opts.logLevel
	if level == 0 {
		level = zapcore.DebugLevel
	}
	core, logs := observer.New(level)
	h.logs = logs
	pid := testPortID
	if opts.targetPID != nil {
		pid = *opts.targetPID
	}
	h.tgt, err = srp.New(srp.Config{
		TargetPortID:   pid,
		Limits:         opts.limits,
		Authorizer:     auth,
		Logger:         zap.New(core),
		MeasureLatency: opts.latency,
		TargetPort:     opts.targetPort,
		MorePorts:      opts.morePorts,
	})
	require.NoError(t, err)
	h.ln, err = h.node.Listen(testPort)
	require.NoError(t, err)
	h.addr = h.ln.Addr()
	if !opts.noServe {
		go func() { h.serveErr <- h.tgt.Serve(context.Background(), h.ln) }()
	}
	t.Cleanup(h.close)
	return h
}

// close shuts the target down and checks that everything came back.
func (h *harness) close() {
	if h.closed {
		return
	}
	h.closed = true
	t := h.t
	defer func() {
		if t.Failed() {
			for _, e := range h.logs.All() {
				t.Logf("target log: %s %s %v", e.Level, e.Message, e.ContextMap())
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if h.gate != nil {
		h.gate.release()
	}
	require.NoError(t, h.tgt.Shutdown(ctx))
	select {
	case err := <-h.serveErr:
		require.ErrorIs(t, err, srp.ErrTargetClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after Shutdown")
	default:
	}
	st := h.tgt.Stats()
	require.Zero(t, st.CreditViolations, "credits granted beyond receive buffers posted")
	require.Zero(t, st.ChannelsOpen)
	require.Zero(t, st.PoolInUse, "data buffers not returned to the pool")
	for _, lu := range h.lus {
		require.NoError(t, lu.Close())
	}
	require.NoError(t, h.fab.Close())
}

// cfg returns an initiator configuration for the harness's target.
func (h *harness) cfg() srptest.Config {
	return srptest.Config{Addr: h.addr, TargetPortID: testPortID}
}

// login logs one channel in, failing the test on error; the channel is closed at cleanup.
func (h *harness) login(cfg srptest.Config) *srptest.Channel {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := srptest.Login(ctx, h.fab, cfg)
	require.NoError(h.t, err)
	h.t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// loginMulti logs n channels of one session in.
func (h *harness) loginMulti(cfg srptest.Config, n int) []*srptest.Channel {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	chs, err := srptest.LoginMulti(ctx, h.fab, cfg, n)
	require.NoError(h.t, err)
	require.Len(h.t, chs, n)
	for _, ch := range chs {
		h.t.Cleanup(func() { _ = ch.Close() })
	}
	return chs
}

// loginErr logs in and returns the error (the channel, if any, is closed at cleanup).
func (h *harness) loginErr(cfg srptest.Config) (*srptest.Channel, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := srptest.Login(ctx, h.fab, cfg)
	if ch != nil {
		h.t.Cleanup(func() { _ = ch.Close() })
	}
	return ch, err
}

// holdReads holds LUN 0's backstore, submits on ch a read of 8 blocks (4 KiB) at each of
// lbas, and returns them once all wait in the backstore: commands caught in the logical unit,
// for the tests of aborts, resets and shutdown.
func (h *harness) holdReads(t *testing.T, ch *srptest.Channel, lbas ...uint32) []*srptest.Pending {
	t.Helper()
	h.gate.hold()
	held := make([]*srptest.Pending, 0, len(lbas))
	for _, lba := range lbas {
		p, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(lba, 8), DataInLen: 4096})
		require.NoError(t, err)
		held = append(held, p)
	}
	testutil.WaitFor(t, fmt.Sprintf("%d reads in the backstore", len(lbas)), func() bool { return h.gate.entered.Load() == int32(len(lbas)) })
	return held
}

// waitStats waits until the target's stats satisfy cond.
func (h *harness) waitStats(what string, cond func(srp.Stats) bool) srp.Stats {
	h.t.Helper()
	var st srp.Stats
	testutil.WaitFor(h.t, what, func() bool { st = h.tgt.Stats(); return cond(st) })
	return st
}

// waitIdle waits until all data buffers are back in their pool.
func (h *harness) waitIdle() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(h.t, h.tgt.WaitPoolsIdle(ctx))
}

// logged reports whether an entry with message msg was logged (and returns the first).
func (h *harness) logged(msg string) (observer.LoggedEntry, bool) {
	entries := h.logs.FilterMessage(msg).All()
	if len(entries) == 0 {
		return observer.LoggedEntry{}, false
	}
	return entries[0], true
}

// writeReadBack writes data at lba of LUN 0 through ch, described by layout (nil: as ib_srp
// does), reads it back the same way and compares: the step of the tests that drive I/O from
// several goroutines, which return an error instead of failing the test.
func writeReadBack(ctx context.Context, ch *srptest.Channel, lba uint32, data []byte, layout srptest.Layout) error {
	blocks := uint16(len(data) / testBlockSize)
	rsp, err := ch.Do(ctx, &srptest.Request{CDB: srptest.CDBWrite10(lba, blocks), DataOut: data, Layout: layout})
	if err == nil {
		err = rsp.Err()
	}
	if err != nil {
		return fmt.Errorf("write lba %d: %w", lba, err)
	}
	rsp, err = ch.Do(ctx, &srptest.Request{CDB: srptest.CDBRead10(lba, blocks), DataInLen: len(data), Layout: layout})
	if err == nil {
		err = rsp.Err()
	}
	if err != nil {
		return fmt.Errorf("read lba %d: %w", lba, err)
	}
	if !bytes.Equal(rsp.DataIn, data) {
		return fmt.Errorf("lba %d, %d blocks, layout %T: the data read back differs", lba, blocks, layout)
	}
	return nil
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustWrite writes data at lba of lun through ch and requires GOOD.
func mustWrite(t *testing.T, ch *srptest.Channel, lun uint16, lba uint32, data []byte) {
	t.Helper()
	rsp, err := ch.Write10(ctxT(t), lun, lba, data, testBlockSize)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
}

// mustRead reads blocks at lba of lun through ch, requires GOOD and returns the data.
func mustRead(t *testing.T, ch *srptest.Channel, lun uint16, lba uint32, blocks uint16) []byte {
	t.Helper()
	rsp, err := ch.Read10(ctxT(t), lun, lba, blocks, testBlockSize)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	return rsp.DataIn
}

// senseOf returns key/asc/ascq of a response, failing if it has no sense.
func senseOf(t *testing.T, rsp *srptest.Response) (uint8, uint8, uint8) {
	t.Helper()
	k, a, q, ok := rsp.SenseKey()
	require.True(t, ok, "response without sense data")
	return k, a, q
}

// requireTURSense sends TEST UNIT READY to lun on ch and requires the sense key, ASC and ASCQ
// of the answer to be want: how these tests see a pending unit attention or a refused LUN.
func requireTURSense(t *testing.T, ch *srptest.Channel, lun uint16, want []uint8, msgAndArgs ...any) {
	t.Helper()
	rsp, err := ch.TestUnitReady(ctxT(t), lun)
	require.NoError(t, err)
	k, asc, ascq := senseOf(t, rsp)
	require.Equal(t, want, []uint8{k, asc, ascq}, msgAndArgs...)
}

// clearUA consumes the POWER ON unit attention of LUN lun on ch.
func clearUA(t *testing.T, ch *srptest.Channel, lun uint16) {
	t.Helper()
	for i := 0; i < 4; i++ {
		rsp, err := ch.TestUnitReady(ctxT(t), lun)
		require.NoError(t, err)
		if rsp.Good() {
			return
		}
		k, _, _ := senseOf(t, rsp)
		require.Equal(t, uint8(scsi.SenseUnitAttention), k, "TEST UNIT READY: %v", rsp.Err())
	}
	t.Fatal("unit attentions did not clear")
}
