package srp

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// Work request IDs: the kind in the top two bits; for commands the context index in the low 32
// bits and idLast on the last work request of a batch (the one that always completes: signaled
// on success, flushed or failed otherwise).
const (
	idKindMask  uint64 = 3 << 62
	idRecv      uint64 = 0 << 62
	idCmd       uint64 = 1 << 62
	idCtl       uint64 = 2 << 62
	idLast      uint64 = 1 << 40
	idIndexMask uint64 = 1<<32 - 1
)

// Channel states.
type chState uint8

const (
	chLive     chState = iota
	chDraining         // target shutdown: SRP_T_LOGOUT sent, new commands answered BUSY
	chClosing          // disconnected: draining flushes and commands, then teardown
)

type stopMode int32

const (
	stopNone stopMode = iota
	stopGraceful
	stopHard
)

type stopReq struct {
	why    string
	logout iu.TLogoutReason
}

// Sizes of the channel's registered region.
const (
	recvAlign = 512 // immediate data lands 512-byte aligned for O_DIRECT, as LIO pads
	sendAlign = 64
	pollBatch = 64
	// spareRecvs is the receive buffer posted beyond the credits granted: the initiator
	// answers an SRP_CRED_REQ with an SRP_CRED_RSP that consumes no credit, so a target that
	// sends SRP_CRED_REQ needs one receive more than it grants (SRP r16a: SRP_CRED_RSP carries no
	// REQUEST LIMIT DELTA of its own; ib_srp, drivers/infiniband/ulp/srp/ib_srp.c
	// srp_process_cred_req, assumes at most one such request outstanding).
	spareRecvs = 1
)

// Target-initiated IUs, each with its own send buffer after the contexts' (slot index in the
// work request ID).
const (
	ctlTLogout   = 0 // SRP_T_LOGOUT
	ctlCredReq   = 1 // SRP_CRED_REQ
	ctlSendSlots = 2
)

// channel is one RDMA channel (RC queue pair) of a session. One goroutine (run) owns the queue
// pair: it polls completions and events, parses IUs, posts RDMA and responses, and keeps all
// per-channel accounting without locks. SCSI commands execute on a pool of worker goroutines
// (they block in the backstore); task management runs on its own goroutine (it blocks until
// the commands it aborts have stopped). Both hand contexts back through ch.done.
type channel struct {
	t      *Target
	sess   *session
	id     uint64
	log    *zap.Logger
	conn   ib.Conn
	pool   *bufPool
	remote netip.AddrPort

	// Negotiated at login; immutable afterwards.
	credits    int // granted at login
	nrecv      int // receive buffers: credits + spareRecvs
	nctx       int
	sqDepth    int
	maxDesc    int
	maxIT      uint32
	maxTI      uint32
	immOff     uint16 // 0: immediate data not granted
	pad        int
	stride     int
	sendStride int
	workers    int

	slab     *ib.Slab
	mr       ib.MR
	mem      []byte
	recvWRs  []ib.RecvWR
	recvSGEs []ib.SGE
	ctxs     []cmdCtx
	ctlOff   uint64

	// Shared with other goroutines.
	work      chan *cmdCtx
	tmfWork   chan *cmdCtx
	done      chan *cmdCtx
	wake      chan struct{}
	stop      atomic.Pointer[stopReq]
	stopHow   atomic.Int32
	closing   atomic.Bool // workers skip execution
	detached  atomic.Bool // replaced by a SINGLE login: its closing is not a nexus loss
	abortScan atomic.Bool
	closedCh  chan struct{}
	wg        sync.WaitGroup

	// Owned by the channel goroutine.
	state       chState
	free        []*cmdCtx
	waitRecv    []parkedIU // IUs received while no context was free
	bufHead     *cmdCtx
	bufTail     *cmdCtx
	bufWaiting  bool
	sqHead      *cmdCtx
	sqTail      *cmdCtx
	heldHead    *cmdCtx // commands that arrived after a task management function in progress
	heldTail    *cmdCtx
	tmfActive   int
	recvPosted  int
	sendBatches int
	sqFree      int
	ledger      creditLedger
	busy        int // contexts not free
	execCount   int // contexts with a worker or the task management goroutine
	active      int // commands the target works on (shutdown drains them)
	ctlBusy     [ctlSendSlots]bool
	credReqOut  bool // an SRP_CRED_REQ waits for its SRP_CRED_RSP
	credReqTag  iu.Tag
	noFlush     bool // no flush completions will come: device removed, post failure, timeout
	connClosed  bool
	timer       *time.Timer
	timerAt     time.Time
	timerArmed  bool
	drainAt     time.Time
	closeReason string
	creditWarn  bool
	wrs         []ib.SendWR
	sges        []ib.SGE
	wcs         []ib.Completion
	// The work requests queued by this pass of the loop, posted together by flushSends: one
	// ibv_post_send (one system call on soft-RoCE) for all the responses of a poll batch.
	batch     []ib.SendWR
	batchSGEs []ib.SGE
	// Completion waiting (Limits.Completion).
	armer       ib.NotifyArmer // nil if the connection arms itself
	notifyArmed bool           // armed by us and its event not yet taken from Ready
	// Adaptive (pollWindowOpen): the idle passes since the last work, and the clock when the
	// first of them read it (0: not read yet; -1: the window is over).
	idleSpins int
	lastWork  int64
	// pollNow is the clock (nanotime) read once per PollCompletions call that returned
	// completions, and the time of all of them: the arrival of the IUs it delivered and the
	// end of the commands whose response SEND it completed (scsi.LUStats latency). One read
	// per batch rather than two per command, because clock reads are expensive where the
	// clocksource traps (pollWindowOpen); latencies come out late by at most the time taken to
	// handle one batch.
	pollNow int64

	// Data buffers held (bytes of pool blocks), against the quota Limits.MaxChannelBuffer.
	bufHeld  int64
	bufQuota int64
	// The stall watchdog (watchdog): sendProgress counts send-queue completions; wdAt is the
	// next check (zero: not armed), wdSeen the count at the last check that saw progress, at
	// wdSince.
	sendProgress uint64
	wdSeen       uint64
	wdAt         time.Time
	wdSince      time.Time
	// BUSY answers are logged at most once per busyLogEvery per channel, with a count.
	busyLogAt int64
	busyCount int
	// Refused commands are logged at most rejectLogBurst times per rejectLogEvery.
	refusedAt         int64
	refusedN          int
	refusedSuppressed int

	// For operators (Target.Sessions): loginAt and qpn are set before the goroutines start;
	// pubActive and pubGranted are copies of active and ledger.granted that the channel
	// goroutine publishes once per pass of its loop (publish), so that reading them takes no
	// lock on the I/O path.
	loginAt    time.Time
	qpn        uint32
	pubActive  atomic.Int32
	pubGranted atomic.Int64
}

// busyLogEvery is how often a channel may log that it answered BUSY for want of a buffer.
const busyLogEvery = 10 * time.Second

// clockEvery is how many idle passes of an adaptive channel go by between clock reads. A pass
// is a completion-queue poll and a yield, microseconds at most, so the poll window ends at
// most a few hundred microseconds late on the slowest machines.
const clockEvery = 32

// channelParams are the outcome of a successful login check.
type channelParams struct {
	credits, sqDepth, maxDesc int
	immOff                    uint16
	initiatorDepth, respRes   uint8
}

// newChannel allocates and registers everything a channel needs and builds its receive work
// requests; nothing is posted yet.
func newChannel(t *Target, sess *session, pool *bufPool, pd ib.ProtectionDomain, p channelParams, remote netip.AddrPort) (*channel, error) {
	lim := t.lim
	ch := &channel{
		t:       t,
		sess:    sess,
		id:      t.chanID.Add(1),
		pool:    pool,
		remote:  remote,
		credits: p.credits,
		nrecv:   p.credits + spareRecvs,
		nctx:    2 * p.credits,
		sqDepth: p.sqDepth,
		maxDesc: p.maxDesc,
		maxIT:   lim.MaxITIULen,
		maxTI:   lim.MaxTIIULen,
		immOff:  p.immOff,
	}
	ch.workers = min(lim.WorkersPerChannel, ch.nctx)
	if ch.immOff != 0 {
		ch.pad = (recvAlign - int(ch.immOff)%recvAlign) % recvAlign
	}
	ch.stride = roundUp(ch.pad+int(ch.maxIT), recvAlign)
	ch.sendStride = roundUp(int(ch.maxTI), sendAlign)
	recvBytes := ch.nrecv * ch.stride
	size := recvBytes + (ch.nctx+ctlSendSlots)*ch.sendStride
	slab, err := ib.NewSlab(size)
	if err != nil {
		return nil, fmt.Errorf("srp: channel memory of %d bytes: %w", size, err)
	}
	ch.slab = slab
	ch.mem = slab.Bytes()[:size]
	mr, err := pd.RegisterMemory(ch.mem, ib.AccessLocalWrite)
	if err != nil {
		_ = slab.Close()
		return nil, fmt.Errorf("srp: registering %d bytes of channel memory: %w", size, err)
	}
	ch.mr = mr

	ch.recvWRs = make([]ib.RecvWR, ch.nrecv)
	ch.recvSGEs = make([]ib.SGE, ch.nrecv)
	for i := range ch.recvWRs {
		ch.recvSGEs[i] = ib.SGE{MR: mr, Offset: uint64(i*ch.stride + ch.pad), Length: ch.maxIT}
		ch.recvWRs[i] = ib.RecvWR{ID: idRecv | uint64(i), SGL: ch.recvSGEs[i : i+1]}
	}
	ch.ctxs = make([]cmdCtx, ch.nctx)
	ch.free = make([]*cmdCtx, 0, ch.nctx)
	for i := ch.nctx - 1; i >= 0; i-- {
		c := &ch.ctxs[i]
		c.ch = ch
		c.idx = uint32(i)
		c.recv = -1
		c.buf, c.table = noBuf, noBuf
		c.abortDone = make(chan struct{}, 1)
		c.sendOff = uint64(recvBytes + i*ch.sendStride)
		ch.free = append(ch.free, c)
	}
	ch.ctlOff = uint64(recvBytes + ch.nctx*ch.sendStride)
	ch.waitRecv = make([]parkedIU, 0, ch.nrecv)
	ch.work = make(chan *cmdCtx, ch.nctx)
	ch.tmfWork = make(chan *cmdCtx, ch.nctx)
	ch.done = make(chan *cmdCtx, 2*ch.nctx)
	ch.wake = make(chan struct{}, 1)
	ch.closedCh = make(chan struct{})
	ch.wrs = make([]ib.SendWR, 0, ch.maxDesc+1)
	ch.sges = make([]ib.SGE, 0, ch.maxDesc+1)
	ch.wcs = make([]ib.Completion, pollBatch)
	// One command's chain always fits: at most maxDesc RDMA WRITEs and the response SEND.
	batchCap := max(2*(ch.maxDesc+1), 256)
	ch.batch = make([]ib.SendWR, 0, batchCap)
	ch.batchSGEs = make([]ib.SGE, 0, batchCap)
	ch.sqFree = ch.sqDepth
	ch.bufQuota = lim.MaxChannelBuffer
	ch.recvPosted = ch.nrecv
	ch.ledger = creditLedger{granted: int64(ch.credits)}
	ch.timer = time.NewTimer(time.Hour)
	ch.timer.Stop()
	ch.log = sess.log.With(zap.Uint64("channel", ch.id), zap.Stringer("src", remote))
	return ch, nil
}

// release frees the channel's memory; the queue pair must be closed (or never created).
func (ch *channel) release() {
	if err := ch.mr.Deregister(); err != nil {
		ch.log.Warn("deregistering channel memory", zap.Error(err))
	}
	if err := ch.slab.Close(); err != nil {
		ch.log.Warn("unmapping channel memory", zap.Error(err))
	}
}

func roundUp(n, a int) int { return (n + a - 1) / a * a }

// recvBuf returns receive buffer i (the bytes the IU lands in).
func (ch *channel) recvBuf(i int32) []byte {
	off := int(i)*ch.stride + ch.pad
	return ch.mem[off : off+int(ch.maxIT)]
}

// accepted records, before the channel is added to its session (where Target.Sessions reads
// it), when its login was accepted and its queue pair number.
func (ch *channel) accepted(conn ib.Conn) {
	ch.loginAt = time.Now()
	if q, ok := conn.(ib.QPNumberer); ok {
		ch.qpn = q.QPNum()
	}
	ch.publish()
}

// start launches the channel's goroutines on an accepted connection.
func (ch *channel) start(conn ib.Conn) {
	ch.conn = conn
	if a, ok := conn.(ib.NotifyArmer); ok && ch.t.lim.Completion != CompletionPoll {
		ch.armer = a
	}
	ch.pool.register(ch.wake)
	ch.wg.Add(ch.workers + 1)
	for range ch.workers {
		go ch.worker()
	}
	go ch.tmfLoop()
	go ch.run()
}

// signal wakes the channel goroutine.
func (ch *channel) signal() {
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

// requestStop asks the channel to close: gracefully (SRP_T_LOGOUT, drain, disconnect) or at
// once. logout is the SRP_T_LOGOUT reason sent before disconnecting.
func (ch *channel) requestStop(mode stopMode, why string, logout iu.TLogoutReason) {
	ch.stop.Store(&stopReq{why: why, logout: logout})
	for {
		cur := ch.stopHow.Load()
		if cur >= int32(mode) || ch.stopHow.CompareAndSwap(cur, int32(mode)) {
			break
		}
	}
	ch.signal()
}

// worker executes SCSI commands.
func (ch *channel) worker() {
	defer ch.wg.Done()
	for c := range ch.work {
		if c.state() == ctxCmd && !ch.closing.Load() {
			c.lunMap.Execute(&c.cmd)
		}
		ch.done <- c
	}
}

// run is the channel goroutine.
func (ch *channel) run() {
	defer ch.teardown()
	for {
		worked := ch.poll()
		ch.checkStop()
		if ch.abortScan.Swap(false) {
			ch.scanAborted()
		}
		if ch.bufHead != nil {
			ch.retryBufWaiters()
		}
		ch.maybeCredReq()
		switch ch.state {
		case chDraining:
			if ch.active == 0 {
				ch.beginClose("target shutdown: all commands done")
				continue
			}
		case chClosing:
			if ch.noFlush && !ch.connClosed {
				ch.forceRelease()
			}
			if ch.drained() {
				return
			}
		}
		ch.flushSends()
		ch.publish()
		var timerC <-chan time.Time
		if ch.timerArmed {
			timerC = ch.timer.C
		}
		var readyC <-chan struct{}
		if !ch.connClosed {
			readyC = ch.conn.Ready()
		}
		// What is already there is taken without sleeping.
		select {
		case <-readyC:
			ch.notifyArmed = false
			continue
		case c := <-ch.done:
			ch.onDoneAll(c)
			ch.noteWork()
			continue
		case <-ch.wake:
			continue
		case <-timerC:
			ch.timerArmed = false
			ch.onTimer()
			continue
		default:
		}
		if readyC != nil && !ch.idle(worked) {
			continue
		}
		select {
		case <-readyC:
			ch.notifyArmed = false
		case c := <-ch.done:
			ch.onDoneAll(c)
		case <-ch.wake:
		case <-timerC:
			ch.timerArmed = false
			ch.onTimer()
		}
	}
}

// publish makes the channel's commands in progress and credits visible to Target.Sessions:
// two loads and, when a value changed, a store, once per pass of the loop.
func (ch *channel) publish() {
	if a := int32(ch.active); ch.pubActive.Load() != a {
		ch.pubActive.Store(a)
	}
	if g := ch.ledger.granted; ch.pubGranted.Load() != g {
		ch.pubGranted.Store(g)
	}
}

// idle decides, when a pass of the loop found nothing more to do, whether the channel may
// sleep now (Limits.Completion): a polling channel goes round again instead, and before
// sleeping the completion queue is armed and polled once more, since a completion that arrived
// before the arm raises no event.
func (ch *channel) idle(worked bool) bool {
	switch ch.t.lim.Completion {
	case CompletionPoll:
		runtime.Gosched()
		return false
	case CompletionAdaptive:
		// Keep polling for PollWindow after the last work: a window longer than the
		// initiator's round trip catches its next command without a wake-up, and a channel
		// with no I/O for that long sleeps and costs nothing.
		if worked {
			ch.noteWork()
		}
		if ch.pollWindowOpen() {
			runtime.Gosched()
			return false
		}
	}
	if ch.armer == nil || ch.notifyArmed {
		return true
	}
	if err := ch.armer.ArmNotify(); err != nil {
		// Closed or removed: the connection's events still signal Ready.
		return true
	}
	ch.notifyArmed = true
	return false
}

// noteWork opens a new poll window (adaptive): the channel found work.
func (ch *channel) noteWork() { ch.idleSpins, ch.lastWork = 0, 0 }

// pollWindowOpen counts an idle pass of an adaptive channel and reports whether its poll
// window is still open. The clock is read once per clockEvery passes, not on every one: in a
// VM whose clocksource is the HPET (as TCG guests get) each read is a system call and a
// trapped device access, and reading it on every pass cost the daemon an eighth of its CPU
// time. The first read starts the window; once it is over it stays over until noteWork.
func (ch *channel) pollWindowOpen() bool {
	if ch.lastWork < 0 {
		return false
	}
	ch.idleSpins++
	if ch.idleSpins%clockEvery != 0 {
		return true
	}
	now := nanotime()
	if ch.lastWork == 0 {
		ch.lastWork = now
	}
	if now-ch.lastWork < int64(ch.t.lim.PollWindow) {
		return true
	}
	ch.lastWork = -1
	return false
}

// onDoneAll takes back c and every other context the workers have returned meanwhile.
func (ch *channel) onDoneAll(c *cmdCtx) {
	ch.onDone(c)
	for {
		select {
		case c := <-ch.done:
			ch.onDone(c)
		default:
			return
		}
	}
}

// poll drains the completion queue and the connection events. It reports whether it found
// any.
func (ch *channel) poll() bool {
	if ch.connClosed {
		return false
	}
	found := false
	for {
		n, err := ch.conn.PollCompletions(ch.wcs)
		if err != nil {
			ch.log.Error("polling completions failed", zap.Error(err))
			ch.noFlush = true
			ch.beginClose("completion queue failed")
			return true
		}
		if n > 0 && ch.t.cfg.MeasureLatency {
			ch.pollNow = nanotime()
		}
		for i := 0; i < n; i++ {
			ch.onCompletion(&ch.wcs[i])
		}
		if n > 0 {
			found = true
		}
		if n < len(ch.wcs) {
			break
		}
	}
	for {
		ev, ok := ch.conn.PollEvent()
		if !ok {
			break
		}
		found = true
		switch ev {
		case ib.EventEstablished:
			ch.log.Debug("connection established")
		case ib.EventDisconnected:
			ch.beginClose("initiator disconnected")
		case ib.EventDeviceRemoved:
			ch.noFlush = true
			ch.beginClose("RDMA device removed")
		}
	}
	return found
}

// checkStop acts on a stop request from another goroutine.
func (ch *channel) checkStop() {
	mode := stopMode(ch.stopHow.Load())
	if mode == stopNone || ch.state == chClosing {
		return
	}
	req := ch.stop.Load()
	if mode == stopGraceful {
		if ch.state == chLive {
			ch.state = chDraining
			ch.log.Info("draining channel", zap.String("reason", req.why))
			ch.sendTLogout(req.logout)
		}
		return
	}
	ch.sendTLogout(req.logout)
	ch.beginClose(req.why)
}

// onCompletion dispatches one completion.
func (ch *channel) onCompletion(wc *ib.Completion) {
	switch wc.ID & idKindMask {
	case idRecv:
		ch.onRecv(int32(wc.ID&idIndexMask), wc)
	case idCmd:
		idx := wc.ID & idIndexMask
		if idx >= uint64(len(ch.ctxs)) {
			ch.log.Error("completion for an unknown work request", zap.Uint64("wr_id", wc.ID))
			return
		}
		ch.onSendCompletion(&ch.ctxs[idx], wc)
	case idCtl:
		slot := wc.ID & idIndexMask
		if slot >= ctlSendSlots {
			ch.log.Error("completion for an unknown work request", zap.Uint64("wr_id", wc.ID))
			return
		}
		ch.sendBatches--
		ch.sendProgress++
		ch.sqFree++
		ch.ctlBusy[slot] = false
		if wc.Status != ib.StatusSuccess && wc.Status != ib.StatusWRFlushError {
			what := "SRP_T_LOGOUT SEND"
			if slot == ctlCredReq {
				what = "SRP_CRED_REQ SEND"
			}
			ch.rdmaError(what, nil, wc.Status)
		}
		ch.serviceSQ()
	default:
		ch.log.Error("completion for an unknown work request", zap.Uint64("wr_id", wc.ID))
	}
}

// onRecv handles a receive completion: an IU arrived in buffer i (or the receive was flushed).
func (ch *channel) onRecv(i int32, wc *ib.Completion) {
	ch.recvPosted--
	if i < 0 || int(i) >= ch.nrecv {
		ch.log.Error("receive completion for an unknown buffer", zap.Uint64("wr_id", wc.ID))
		return
	}
	if wc.Status != ib.StatusSuccess {
		if wc.Status == ib.StatusWRFlushError && ch.state == chClosing {
			return
		}
		ch.t.stats.rdmaErrors.Add(1)
		hint := ""
		if wc.Status == ib.StatusLocalLengthError {
			hint = fmt.Sprintf("the initiator sent an IU longer than max_it_iu_len %d: it must not exceed the length granted at login", ch.maxIT)
		}
		ch.log.Error("receive failed", zap.Stringer("status", wc.Status), zap.String("hint", hint))
		ch.beginClose("receive failed: " + wc.Status.String())
		return
	}
	if ch.state == chClosing {
		return
	}
	ch.handleIU(i, int(wc.ByteLen))
}

// handleIU dispatches the IU in receive buffer i.
func (ch *channel) handleIU(i int32, n int) {
	if n == 0 || n > int(ch.maxIT) {
		ch.protocolError(iu.TLogoutInvalidIULength, fmt.Sprintf("IU of %d bytes", n))
		return
	}
	b := ch.recvBuf(i)[:n]
	switch op := iu.Opcode(b[0]); op {
	case iu.OpCmd, iu.OpTskMgmt:
		if ch.ledger.consume() && !ch.creditWarn {
			ch.creditWarn = true
			ch.log.Warn("initiator sent more IUs than it had credits (REQUEST LIMIT exceeded)")
		}
		c := ch.allocCtx()
		if c == nil {
			// Every context is busy, some of them only waiting for their SEND completion
			// (the initiator may send as soon as it sees a response). Park the IU; it
			// starts when a context is freed.
			ch.waitRecv = append(ch.waitRecv, parkedIU{i, int32(n), ch.pollNow})
			return
		}
		ch.startIU(c, i, n, ch.pollNow)
	case iu.OpILogout:
		ch.log.Info("initiator logged out (SRP_I_LOGOUT)")
		ch.repost(i)
		ch.beginClose("SRP_I_LOGOUT")
	case iu.OpCredRsp:
		ch.onCredRsp(b)
		ch.repost(i)
	case iu.OpAerRsp:
		// The target never sends SRP_AER_REQ; an answer to one is ignored (LIO and SCST only
		// log such responses).
		ch.log.Debug("ignoring unsolicited initiator response", zap.Stringer("opcode", op))
		ch.repost(i)
	default:
		ch.protocolError(iu.TLogoutInvalidIUType, fmt.Sprintf("invalid IU type %v", op))
	}
}

func (ch *channel) allocCtx() *cmdCtx {
	if len(ch.free) == 0 {
		return nil
	}
	c := ch.free[len(ch.free)-1]
	ch.free = ch.free[:len(ch.free)-1]
	ch.busy++
	return c
}

// startIU starts an SRP_CMD or SRP_TSK_MGMT held in receive buffer i with context c; it
// arrived at nanotime at.
func (ch *channel) startIU(c *cmdCtx, i int32, n int, at int64) {
	c.recv = i
	c.arrived = at
	c.stage = stageNone
	c.real, c.xportFail = false, false
	c.buf, c.table = noBuf, noBuf
	c.batchWRs = 0
	c.lunMap = nil
	c.discardAbortSignal()
	b := ch.recvBuf(i)[:n]
	if n < 16 {
		// Not even a tag to answer with.
		ch.finish(c, false)
		ch.protocolError(iu.TLogoutInvalidIULength, fmt.Sprintf("%v of %d bytes", iu.Opcode(b[0]), n))
		return
	}
	if iu.Opcode(b[0]) == iu.OpTskMgmt {
		ch.startTMF(c, b)
		return
	}
	ch.startCmd(c, b)
}

// startCmd parses an SRP_CMD and starts moving its data.
func (ch *channel) startCmd(c *cmdCtx, b []byte) {
	ch.t.stats.commands.Add(1)
	req := iu.Cmd(b)
	tag := req.Tag()
	var lun uint64
	if len(b) >= iu.CmdMinSize {
		lun = req.LUN()
	}
	c.cmd.Reset()
	c.cmd.Nexus = ch.sess.nexus
	c.cmd.Tag = uint64(tag)
	c.cmd.LUN = lun
	c.cmd.DataIn, c.cmd.DataOut = nil, nil
	m, lu, held := ch.holdLU(lun)
	c.lunMap = m
	if held {
		c.held = lu
	}
	c.activate(ctxCmd, ch.t.seq.Add(1), tag, lun, lu)
	if lu != nil {
		c.statLU = lu
		c.class = scsi.OpOther
		if len(b) >= iu.CmdMinSize {
			// The operation code only: the CDB's additional length is not validated yet.
			c.class = scsi.ClassOf(b[iu.CmdCDBOffset : iu.CmdCDBOffset+1])
		}
	}

	if ch.state == chDraining {
		ch.answerTransport(c, scsi.StatusBusy, scsi.ReasonNone, "")
		return
	}
	out, in, err := req.DataBuffers(ch.immOff)
	if err != nil {
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU, err.Error())
		return
	}
	if out.Present() && in.Present() {
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU,
			"bidirectional commands are not supported")
		return
	}
	attr, ok := scsiAttr(req.TaskAttr())
	if !ok {
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU,
			fmt.Sprintf("reserved task attribute %d", req.TaskAttr()))
		return
	}
	c.out, c.in = out, in
	d := c.dataBuf()
	if d.Len() > ch.t.lim.MaxTransferLen {
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU,
			fmt.Sprintf("transfer of %d bytes exceeds max_transfer_len %d", d.Len(), ch.t.lim.MaxTransferLen))
		return
	}
	if d.TableLen() > ch.maxDesc {
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU,
			fmt.Sprintf("%d descriptors exceed the limit of %d", d.TableLen(), ch.maxDesc))
		return
	}
	c.cmd.Attr = attr
	c.cmd.CDB = req.CDB()
	c.real = true
	ch.active++
	switch {
	case out.Format() == iu.DescImm:
		c.cmd.DataOut = out.ImmediateData()
		ch.t.stats.bytesOut.Add(uint64(len(c.cmd.DataOut)))
		ch.dispatch(c)
	case d.Len() == 0:
		ch.dispatch(c)
	default:
		ch.getBuffers(c)
	}
}

// holdLU looks lun up in the session's LUN map and holds the logical unit it names, so that a
// reload that removes or replaces the unit closes its backstore only after this command
// (scsi.LogicalUnit.Retire). A unit that is retiring is no longer in the session's current map
// (SetAuthorizer publishes the new maps before the daemon retires the old units): the lookup
// is made again in that map. Only a map that still hands out a retiring unit (a login that
// raced the reload) gives it unheld; the command then fails on the closed backstore with
// LOGICAL UNIT COMMUNICATION FAILURE.
func (ch *channel) holdLU(lun uint64) (m *scsi.LUNMap, lu *scsi.LogicalUnit, held bool) {
	var tried *scsi.LUNMap
	for {
		m = ch.sess.lunMap.Load()
		mp := m.Lookup(lun)
		if mp == nil {
			return m, nil, false
		}
		if mp.LU.Hold() {
			return m, mp.LU, true
		}
		if m == tried {
			return m, mp.LU, false
		}
		tried = m
	}
}

// answerTransport answers a command without running it: BUSY, or CHECK CONDITION with reason.
func (ch *channel) answerTransport(c *cmdCtx, status scsi.Status, reason scsi.Reason, why string) {
	c.xportFail = true
	c.out, c.in = iu.DataBuf{}, iu.DataBuf{}
	c.cmd.Status = status
	c.cmd.SenseLength = 0
	if reason != scsi.ReasonNone {
		c.cmd.SenseLength = scsi.BuildSense(c.cmd.Sense[:], false, reason, scsi.SenseInfo{})
		ch.t.stats.transportErrors.Add(1)
		if ok, suppressed := ch.refusalLogAllowed(); ok {
			fields := []zap.Field{zap.Uint64("tag", c.tag.Load()), zap.Stringer("reason", reason), zap.String("why", why)}
			if suppressed > 0 {
				fields = append(fields, zap.Int("similar_lines_suppressed", suppressed))
			}
			ch.log.Warn("SRP_CMD refused", fields...)
		}
	}
	c.stage = stageRespond
	ch.newSQWork(c)
}

// refusalLogAllowed rate-limits the log lines of refused commands per channel, as
// rejectLogBurst per rejectLogEvery (a broken or hostile initiator may send nothing else), and
// says how many were left out since the last line.
func (ch *channel) refusalLogAllowed() (ok bool, suppressed int) {
	now := nanotime()
	if ch.refusedAt == 0 || now-ch.refusedAt >= int64(rejectLogEvery) {
		ch.refusedAt, ch.refusedN = now, 0
	}
	if ch.refusedN >= rejectLogBurst {
		ch.refusedSuppressed++
		return false, 0
	}
	ch.refusedN++
	suppressed, ch.refusedSuppressed = ch.refusedSuppressed, 0
	return true, suppressed
}

// getBuffers gets the data buffer (and the scratch buffer of an external table), waiting in
// the channel's FIFO when the pool is exhausted.
func (ch *channel) getBuffers(c *cmdCtx) {
	c.stage = stageNeedBuf
	if ch.bufHead == nil && ch.allocBuffers(c) {
		ch.startData(c)
		return
	}
	ch.t.stats.bufferWaits.Add(1)
	c.waitSince = nanotime()
	c.next = nil
	if ch.bufTail == nil {
		ch.bufHead = c
	} else {
		ch.bufTail.next = c
	}
	ch.bufTail = c
	if !ch.bufWaiting {
		ch.bufWaiting = true
		ch.pool.waiting.Add(1)
	}
	ch.armTimer(time.Now().Add(ch.t.lim.BufferWait))
	// A buffer freed between the failed attempt and waiting.Add went unnoticed: retry once.
	ch.retryBufWaiters()
}

// allocBuffers allocates c's buffers, all or none, within the channel's share of the pool
// (Limits.MaxChannelBuffer): a channel whose initiator stops taking its responses holds at
// most that share until the stall watchdog closes it. A channel that holds nothing may take
// one command's buffers whatever their size, so that no command waits for ever.
func (ch *channel) allocBuffers(c *cmdCtx) bool {
	d := c.dataBuf()
	need := ch.pool.blockBytes(d.Len())
	if d.External() {
		need += ch.pool.blockBytes(uint32(d.TableLen() * iu.DirectBufSize))
	}
	if ch.bufHeld > 0 && ch.bufHeld+need > ch.bufQuota {
		return false
	}
	buf, ok := ch.pool.alloc(d.Len())
	if !ok {
		return false
	}
	if d.External() {
		tbl, ok := ch.pool.alloc(uint32(d.TableLen() * iu.DirectBufSize))
		if !ok {
			ch.pool.release(buf)
			return false
		}
		c.table = tbl
	}
	c.buf = buf
	ch.bufHeld += need
	return true
}

// releaseBuffers gives c's buffers back to the pool.
func (ch *channel) releaseBuffers(c *cmdCtx) {
	ch.bufHeld -= c.buf.bytes() + c.table.bytes()
	ch.pool.release(c.buf)
	ch.pool.release(c.table)
	c.buf, c.table = noBuf, noBuf
}

// startData moves a command that has its buffers on to its first data stage.
func (ch *channel) startData(c *cmdCtx) {
	d := c.dataBuf()
	switch {
	case d.External():
		// The rest of the descriptors are in initiator memory: fetch them first, for
		// data-out to read the data, for data-in to know where to write it.
		c.stage = stageTableRead
		ch.newSQWork(c)
	case c.in.Present():
		c.cmd.DataIn = ch.pool.bytes(c.buf)
		ch.dispatch(c)
	default:
		c.stage = stageDataRead
		ch.newSQWork(c)
	}
}

// retryBufWaiters gives freed buffers to waiting commands, in order.
//
// A command leaves the wait list only once its buffers are allocated: popping the last waiter
// withdraws the channel from the pool's waiting count, and a buffer another channel freed
// after a failed attempt then would signal no one, leaving the command to sleep until
// BufferWait answers it BUSY.
func (ch *channel) retryBufWaiters() {
	for ch.bufHead != nil {
		c := ch.bufHead
		if c.state() != ctxCmd {
			ch.popBuf()
			ch.finishAborted(c)
			continue
		}
		if !ch.allocBuffers(c) {
			return
		}
		ch.popBuf()
		ch.startData(c)
	}
}

func (ch *channel) popBuf() {
	c := ch.bufHead
	ch.bufHead = c.next
	if ch.bufHead == nil {
		ch.bufTail = nil
		if ch.bufWaiting {
			ch.bufWaiting = false
			ch.pool.waiting.Add(-1)
		}
	}
	c.next = nil
}

// newSQWork posts c's next batch now, or queues it behind earlier work waiting for send-queue
// slots.
func (ch *channel) newSQWork(c *cmdCtx) {
	if ch.sqHead == nil && ch.advance(c) {
		return
	}
	c.next = nil
	if ch.sqTail == nil {
		ch.sqHead = c
	} else {
		ch.sqTail.next = c
	}
	ch.sqTail = c
}

// serviceSQ advances queued work as send-queue slots free up.
func (ch *channel) serviceSQ() {
	for ch.sqHead != nil {
		c := ch.sqHead
		ch.sqHead = c.next
		if ch.sqHead == nil {
			ch.sqTail = nil
		}
		c.next = nil
		if !ch.advance(c) {
			c.next = ch.sqHead
			ch.sqHead = c
			if ch.sqTail == nil {
				ch.sqTail = c
			}
			return
		}
	}
}

// advance posts the work of c's stage. It returns false, changing nothing, when the send queue
// has no room for it.
func (ch *channel) advance(c *cmdCtx) bool {
	if ch.state == chClosing {
		ch.finish(c, false)
		return true
	}
	switch c.stage {
	case stageTableRead:
		if c.state() != ctxCmd {
			ch.finishAborted(c)
			return true
		}
		if ch.sqFree < 1 {
			return false
		}
		t := c.dataBuf().TableDescriptor()
		wrs := append(ch.wrs[:0], ib.SendWR{
			ID:         idCmd | uint64(c.idx) | idLast,
			Op:         ib.OpRDMARead,
			Signaled:   true,
			SGL:        append(ch.sges[:0], ib.SGE{MR: ch.pool.mr, Offset: c.table.offset(), Length: t.Len()}),
			RemoteAddr: t.VA(),
			RKey:       t.Key(),
		})
		ch.post(c, wrs)
		return true
	case stageDataRead:
		if c.state() != ctxCmd {
			ch.finishAborted(c)
			return true
		}
		var table []byte
		if c.table.valid() {
			table = ch.pool.bytes(c.table)
		}
		wrs, _ := appendRDMA(ch.wrs[:0], ch.sges[:0], ib.OpRDMARead, c.out, table, ch.pool.mr,
			c.buf.offset(), c.out.Len(), idCmd|uint64(c.idx))
		if len(wrs) == 0 {
			c.cmd.DataOut = ch.pool.bytes(c.buf)
			ch.dispatch(c)
			return true
		}
		if ch.sqFree < len(wrs) {
			return false
		}
		wrs[len(wrs)-1].ID |= idLast
		wrs[len(wrs)-1].Signaled = true
		ch.post(c, wrs)
		return true
	case stageRespond:
		return ch.respond(c)
	}
	ch.log.Error("internal error: send-queue work in an unexpected stage", zap.Uint8("stage", uint8(c.stage)))
	ch.finish(c, false)
	return true
}

// respond posts the response of c (with the RDMA WRITEs of its data-in before it, in one chain),
// or returns false when the send queue has no room.
func (ch *channel) respond(c *cmdCtx) bool {
	tmf := c.state() == ctxTMF
	wrs, sges := ch.wrs[:0], ch.sges[:0]
	var written uint32
	if !tmf && c.in.Present() && c.cmd.DataInLength > 0 && !c.xportFail {
		var table []byte
		if c.table.valid() {
			table = ch.pool.bytes(c.table)
		}
		written = uint32(min(c.cmd.DataInLength, len(c.cmd.DataIn)))
		wrs, sges = appendRDMA(wrs, sges, ib.OpRDMAWrite, c.in, table, ch.pool.mr, c.buf.offset(), written, idCmd|uint64(c.idx))
	}
	if ch.sqFree < len(wrs)+1 {
		return false
	}
	if !tmf && !c.transition(ctxCmd, ctxResponded) {
		// Task management claimed the command while it waited: no response, and none of
		// its initiator memory is touched.
		ch.finishAborted(c)
		return true
	}
	// Give the receive buffer back before granting its credit again: credits granted never
	// exceed the receive buffers posted, less the spare one for an SRP_CRED_RSP.
	ch.repost(c.recv)
	c.recv = -1
	delta, ok := ch.ledger.respond(ch.recvPosted - spareRecvs)
	if !ok {
		ch.t.stats.creditViolations.Add(1)
		ch.log.Error("internal error: credits granted exceed receive buffers posted",
			zap.Int64("granted", ch.ledger.granted), zap.Int("posted", ch.recvPosted))
	}
	sb := ch.mem[c.sendOff : c.sendOff+uint64(ch.sendStride)]
	var n int
	var err error
	tag := iu.Tag(c.tag.Load())
	if tmf {
		n = iu.Rsp(sb).EncodeTskMgmt(tag, delta, c.tm.code)
	} else {
		n, err = encodeCmdRsp(sb, int(ch.maxTI), &c.cmd, tag, delta, c.in.Present(), c.out.Present(), c.xportFail)
	}
	if err != nil {
		ch.log.Error("internal error: encoding SRP_RSP", zap.Error(err))
		ch.finish(c, false)
		ch.beginClose("internal error")
		return true
	}
	sges = append(sges, ib.SGE{MR: ch.mr, Offset: c.sendOff, Length: uint32(n)})
	wrs = append(wrs, ib.SendWR{
		ID:       idCmd | uint64(c.idx) | idLast,
		Op:       ib.OpSend,
		Signaled: true,
		SGL:      sges[len(sges)-1:],
	})
	c.stage = stageSent
	c.written = written
	ch.post(c, wrs)
	if written > 0 {
		ch.t.stats.bytesIn.Add(uint64(written))
	}
	return true
}

// post queues one batch of c, whose last work request is signaled, for flushSends. Each work
// request has one SGE (appendRDMA, respond, advance).
func (ch *channel) post(c *cmdCtx, wrs []ib.SendWR) {
	if len(ch.batch)+len(wrs) > cap(ch.batch) {
		ch.flushSends()
		if ch.state == chClosing && ch.noFlush {
			ch.finish(c, false)
			return
		}
	}
	for i := range wrs {
		wr := wrs[i]
		k := len(ch.batchSGEs)
		ch.batchSGEs = append(ch.batchSGEs, wr.SGL...)
		wr.SGL = ch.batchSGEs[k:len(ch.batchSGEs):len(ch.batchSGEs)]
		ch.batch = append(ch.batch, wr)
	}
	ch.sqFree -= len(wrs)
	ch.sendBatches++
	c.batchWRs = len(wrs)
	ch.armWatchdog()
}

// flushSends posts the queued work requests with one PostSend.
func (ch *channel) flushSends() {
	if len(ch.batch) == 0 {
		return
	}
	n, err := ch.conn.PostSend(ch.batch)
	total := len(ch.batch)
	ch.t.stats.sendPosts.Add(1)
	ch.t.stats.sendWRs.Add(uint64(n))
	ch.batch, ch.batchSGEs = ch.batch[:0], ch.batchSGEs[:0]
	if err != nil {
		// Part of the chain may be posted without its signaled ends: completion accounting
		// for this queue pair is no longer reliable. Close without waiting for flushes; the
		// contexts and their memory are released once the queue pair is closed
		// (forceRelease).
		if !errors.Is(err, ib.ErrClosed) && !errors.Is(err, ib.ErrDeviceRemoved) {
			ch.log.Error("posting work requests failed", zap.Int("posted", n), zap.Int("batch", total), zap.Error(err))
		}
		ch.noFlush = true
		ch.beginClose("post failed")
	}
}

// onSendCompletion handles a send-queue completion of context c.
func (ch *channel) onSendCompletion(c *cmdCtx, wc *ib.Completion) {
	if wc.ID&idLast == 0 {
		// An unsignaled work request completes only when it failed or was flushed; the last
		// one of its batch follows.
		if wc.Status != ib.StatusWRFlushError {
			ch.rdmaError(stageWhat(c.stage), c, wc.Status)
		}
		return
	}
	if c.batchWRs == 0 {
		ch.log.Error("internal error: completion for a context without a batch", zap.Uint32("ctx", c.idx))
		return
	}
	ch.sendBatches--
	ch.sendProgress++
	ch.sqFree += c.batchWRs
	c.batchWRs = 0
	if wc.Status != ib.StatusSuccess {
		if wc.Status != ib.StatusWRFlushError {
			ch.rdmaError(stageWhat(c.stage), c, wc.Status)
		}
		ch.finish(c, false)
		ch.serviceSQ()
		return
	}
	switch c.stage {
	case stageTableRead:
		ch.onTableRead(c)
	case stageDataRead:
		if c.state() != ctxCmd || ch.state == chClosing {
			ch.finishAborted(c)
			break
		}
		c.cmd.DataOut = ch.pool.bytes(c.buf)
		ch.t.stats.bytesOut.Add(uint64(len(c.cmd.DataOut)))
		ch.dispatch(c)
	case stageSent:
		if c.statLU != nil {
			c.statLU.Stats().Complete(c.class, &c.cmd, uint64(c.written), uint64(len(c.cmd.DataOut)), ch.pollNow-c.arrived)
		}
		ch.finish(c, false)
	default:
		ch.log.Error("internal error: send completion in an unexpected stage", zap.Uint8("stage", uint8(c.stage)))
	}
	ch.serviceSQ()
}

// onTableRead checks a fetched external descriptor table and fetches the data.
func (ch *channel) onTableRead(c *cmdCtx) {
	if c.state() != ctxCmd || ch.state == chClosing {
		ch.finishAborted(c)
		return
	}
	table := ch.pool.bytes(c.table)
	d := c.dataBuf()
	if sum := tableTotal(table); sum != uint64(d.Len()) {
		ch.releaseBuffers(c)
		ch.active--
		c.real = false
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU,
			fmt.Sprintf("external descriptor table adds up to %d bytes, TOTAL LENGTH is %d", sum, d.Len()))
		return
	}
	if c.in.Present() {
		c.cmd.DataIn = ch.pool.bytes(c.buf)
		ch.dispatch(c)
		return
	}
	c.stage = stageDataRead
	ch.newSQWork(c)
}

func stageWhat(s cmdStage) string {
	switch s {
	case stageTableRead:
		return "RDMA READ of an external descriptor table"
	case stageDataRead:
		return "RDMA READ of data-out"
	case stageSent:
		return "RDMA WRITE of data-in / SRP_RSP SEND"
	}
	return "work request"
}

// rdmaError logs a failed work request and closes the channel.
func (ch *channel) rdmaError(what string, c *cmdCtx, st ib.Status) {
	ch.t.stats.rdmaErrors.Add(1)
	fields := []zap.Field{zap.String("operation", what), zap.Stringer("status", st)}
	if c != nil {
		fields = append(fields, zap.Uint64("tag", c.tag.Load()), zap.Uint64("lun", c.lun.Load()))
	}
	switch st {
	case ib.StatusRemoteAccessError:
		fields = append(fields, zap.String("hint", "the initiator's memory handle (rkey) or address range is wrong, or it invalidated the buffer early"))
	case ib.StatusTransportRetryExceeded:
		fields = append(fields, zap.String("hint", "the initiator stopped answering (crashed, cable, or it closed its queue pair)"))
	case ib.StatusRNRRetryExceeded:
		fields = append(fields, zap.String("hint", "the initiator had no receive buffer posted"))
	}
	if ch.state != chClosing {
		ch.log.Error("work request failed: closing the channel", fields...)
	}
	ch.beginClose("work request failed: " + st.String())
}

// dispatch hands c to a worker. While a task management function of this channel is in
// progress, commands that arrived after it wait: they must not be caught by it in the logical
// unit (the initiator sent them later, on the same channel).
func (ch *channel) dispatch(c *cmdCtx) {
	if ch.tmfActive > 0 {
		c.stage = stageHeld
		c.next = nil
		if ch.heldTail == nil {
			ch.heldHead = c
		} else {
			ch.heldTail.next = c
		}
		ch.heldTail = c
		return
	}
	c.stage = stageExec
	ch.execCount++
	if lu := c.lu.Load(); lu == nil || lu.NonBlocking() {
		// RAM and null logical units never wait for I/O: running the command here saves two
		// goroutine hand-offs. A command can still wait in the logical unit (for an older
		// ORDERED command, or the LBA range of a COMPARE AND WRITE), but only for commands
		// already executing on other goroutines, which finish without this one.
		if c.state() == ctxCmd && !ch.closing.Load() {
			c.lunMap.Execute(&c.cmd)
		}
		ch.onDone(c)
		return
	}
	ch.work <- c
}

// releaseHeld dispatches the commands held while task management ran.
func (ch *channel) releaseHeld() {
	for ch.heldHead != nil && ch.tmfActive == 0 {
		c := ch.heldHead
		ch.heldHead = c.next
		if ch.heldHead == nil {
			ch.heldTail = nil
		}
		c.next = nil
		if c.state() != ctxCmd {
			ch.finishAborted(c)
			continue
		}
		ch.dispatch(c)
	}
}

// onDone takes back a context from a worker or the task management goroutine.
func (ch *channel) onDone(c *cmdCtx) {
	ch.execCount--
	if ch.state == chClosing {
		if c.stage == stageTMF {
			ch.tmfActive--
		}
		ch.finish(c, false)
		return
	}
	if c.stage == stageTMF {
		ch.tmfActive--
		c.stage = stageRespond
		ch.newSQWork(c)
		ch.releaseHeld()
		return
	}
	if c.cmd.Aborted() {
		c.transition(ctxCmd, ctxAbortedLocal)
	}
	if c.state() != ctxCmd {
		ch.finishAborted(c)
		return
	}
	c.stage = stageRespond
	ch.newSQWork(c)
}

// finishAborted ends a command that gets no response: its credit is owed to the initiator
// and returned with the next response (LIO's srpt_aborted_task).
func (ch *channel) finishAborted(c *cmdCtx) {
	ch.t.stats.aborted.Add(1)
	ch.finish(c, true)
}

// finish releases c: buffers back to the pool, its receive buffer re-posted (unless closing),
// and the context back on the free list, then starts an IU parked for want of a context.
func (ch *channel) finish(c *cmdCtx, owed bool) {
	ch.releaseBuffers(c)
	if c.recv >= 0 {
		if ch.state != chClosing {
			ch.repost(c.recv)
			if owed {
				ch.ledger.owe()
			}
		}
		c.recv = -1
	}
	if c.real {
		c.real = false
		ch.active--
	}
	c.cmd.DataIn, c.cmd.DataOut, c.cmd.CDB = nil, nil, nil
	c.lunMap = nil
	if c.held != nil {
		c.held.Release()
		c.held = nil
	}
	c.statLU = nil
	c.stage = stageNone
	c.free()
	ch.busy--
	ch.free = append(ch.free, c)
	if len(ch.waitRecv) > 0 && ch.state != chClosing {
		p := ch.waitRecv[0]
		copy(ch.waitRecv, ch.waitRecv[1:])
		ch.waitRecv = ch.waitRecv[:len(ch.waitRecv)-1]
		ch.startIU(ch.allocCtx(), p.recv, int(p.n), p.at)
	}
}

// parkedIU is an IU that arrived (at nanotime at) while every context was busy.
type parkedIU struct {
	recv, n int32
	at      int64
}

// repost posts receive buffer i again.
func (ch *channel) repost(i int32) {
	if i < 0 || ch.state == chClosing {
		return
	}
	if _, err := ch.conn.PostRecv(ch.recvWRs[i : i+1]); err != nil {
		if !errors.Is(err, ib.ErrClosed) && !errors.Is(err, ib.ErrDeviceRemoved) {
			ch.log.Error("posting a receive buffer failed", zap.Error(err))
		}
		ch.noFlush = true
		ch.beginClose("post receive failed")
		return
	}
	ch.recvPosted++
}

// scanAborted finds commands claimed by task management while they waited in a list and ends
// them.
func (ch *channel) scanAborted() {
	var keep, keepTail *cmdCtx
	for c := ch.bufHead; c != nil; {
		next := c.next
		c.next = nil
		if c.state() != ctxCmd {
			ch.finishAborted(c)
		} else {
			if keepTail == nil {
				keep = c
			} else {
				keepTail.next = c
			}
			keepTail = c
		}
		c = next
	}
	ch.bufHead, ch.bufTail = keep, keepTail
	if ch.bufHead == nil && ch.bufWaiting {
		ch.bufWaiting = false
		ch.pool.waiting.Add(-1)
	}
	keep, keepTail = nil, nil
	for c := ch.sqHead; c != nil; {
		next := c.next
		c.next = nil
		if st := c.state(); st == ctxAbortedTMF || st == ctxAbortedLocal {
			ch.finishAborted(c)
		} else {
			if keepTail == nil {
				keep = c
			} else {
				keepTail.next = c
			}
			keepTail = c
		}
		c = next
	}
	ch.sqHead, ch.sqTail = keep, keepTail
	keep, keepTail = nil, nil
	for c := ch.heldHead; c != nil; {
		next := c.next
		c.next = nil
		if c.state() != ctxCmd {
			ch.finishAborted(c)
		} else {
			if keepTail == nil {
				keep = c
			} else {
				keepTail.next = c
			}
			keepTail = c
		}
		c = next
	}
	ch.heldHead, ch.heldTail = keep, keepTail
	ch.serviceSQ()
}

// onTimer expires buffer waits and the drain deadline.
func (ch *channel) onTimer() {
	now := time.Now()
	if ch.state == chClosing {
		if !ch.drainAt.IsZero() && !now.Before(ch.drainAt) && !ch.noFlush {
			ch.log.Error("flush completions did not arrive in time: closing the queue pair anyway",
				zap.Int("receives", ch.recvPosted), zap.Int("send_batches", ch.sendBatches),
				zap.Duration("drain_timeout", ch.t.lim.DrainTimeout))
			ch.noFlush = true
		}
		if ch.execCount > 0 {
			ch.log.Warn("still waiting for commands to leave the logical units", zap.Int("commands", ch.execCount))
			ch.armTimer(now.Add(ch.t.lim.DrainTimeout))
		}
		if !ch.noFlush && now.Before(ch.drainAt) {
			// The timer fired for something armed before the close (a buffer wait, the
			// watchdog): the drain deadline still needs it.
			ch.armTimer(ch.drainAt)
		}
		return
	}
	if !ch.wdAt.IsZero() && !now.Before(ch.wdAt) {
		ch.watchdog(now)
		if ch.state == chClosing {
			return
		}
	}
	clock := nanotime()
	deadline := clock - int64(ch.t.lim.BufferWait)
	for ch.bufHead != nil && ch.bufHead.waitSince <= deadline {
		c := ch.bufHead
		ch.popBuf()
		ch.t.stats.bufferBusy.Add(1)
		ch.busyCount++
		ch.active--
		c.real = false
		ch.answerTransport(c, scsi.StatusBusy, scsi.ReasonNone, "")
	}
	if ch.busyCount > 0 && (ch.busyLogAt == 0 || clock-ch.busyLogAt >= int64(busyLogEvery)) {
		// Silent BUSY answers hide a starved target: say so, at most once per busyLogEvery.
		ch.log.Warn("commands answered BUSY: no data buffer within buffer_wait",
			zap.Int("commands", ch.busyCount), zap.Duration("buffer_wait", ch.t.lim.BufferWait),
			zap.Int64("channel_buffer_bytes", ch.bufHeld), zap.Int64("max_channel_buffer", ch.bufQuota),
			zap.Int64("pool_in_use", ch.pool.inUse.Load()), zap.Int64("pool_size", ch.pool.size()))
		ch.busyCount, ch.busyLogAt = 0, clock
	}
	if ch.bufHead != nil {
		ch.armTimer(time.Now().Add(time.Duration(ch.bufHead.waitSince - deadline)))
	}
	if !ch.wdAt.IsZero() {
		ch.armTimer(ch.wdAt)
	}
}

// watchdogPeriod is how often the stall watchdog looks at a channel with work outstanding:
// a stall is noticed between RDMATimeout and RDMATimeout + watchdogPeriod after the last
// completion.
func (ch *channel) watchdogPeriod() time.Duration { return ch.t.lim.RDMATimeout / 4 }

// armWatchdog starts watching the send queue when work is posted; a watchdog already armed
// stays as it is, so a busy channel reads the clock once per watchdogPeriod, not per post.
func (ch *channel) armWatchdog() {
	if !ch.wdAt.IsZero() {
		return
	}
	now := time.Now()
	ch.wdSeen, ch.wdSince = ch.sendProgress, now
	ch.wdAt = now.Add(ch.watchdogPeriod())
	ch.armTimer(ch.wdAt)
}

// watchdog closes the channel when work requests are outstanding and none has completed for
// Limits.RDMATimeout. Send-queue work completes in order on a reliable connection, so one
// that makes no progress holds up all behind it: an initiator that posts no receive buffers
// leaves the response SENDs in RNR retry for ever (ib_srp asks for infinite RNR retries),
// and with them the data buffers of its commands. Disconnecting moves the queue pair to the
// error state; the flushed work requests give the buffers back, and the commands end without
// a response.
func (ch *channel) watchdog(now time.Time) {
	if ch.sendBatches == 0 {
		ch.wdAt = time.Time{}
		return
	}
	if ch.sendProgress != ch.wdSeen {
		ch.wdSeen, ch.wdSince = ch.sendProgress, now
	} else if stalled := now.Sub(ch.wdSince); stalled >= ch.t.lim.RDMATimeout {
		ch.t.stats.rdmaStalls.Add(1)
		ch.log.Warn("RDMA stalled: no work request completed within rdma_timeout; closing the channel and aborting its commands",
			zap.Duration("stalled", stalled), zap.Duration("rdma_timeout", ch.t.lim.RDMATimeout),
			zap.Int("work_batches_outstanding", ch.sendBatches), zap.Int("commands", ch.active),
			zap.Int64("buffer_bytes", ch.bufHeld),
			zap.String("hint", "the initiator stopped taking responses (no receive buffers posted, or hung); a healthy initiator reconnects"))
		ch.wdAt = time.Time{}
		ch.beginClose("RDMA stalled for " + stalled.Round(time.Millisecond).String())
		return
	}
	ch.wdAt = now.Add(ch.watchdogPeriod())
}

func (ch *channel) armTimer(at time.Time) {
	if ch.timerArmed && !at.Before(ch.timerAt) {
		return
	}
	ch.timerAt = at
	ch.timerArmed = true
	ch.timer.Reset(time.Until(at))
}

// ctlBuf returns the send buffer of target-initiated IU slot.
func (ch *channel) ctlBuf(slot int) (off uint64, b []byte) {
	off = ch.ctlOff + uint64(slot*ch.sendStride)
	return off, ch.mem[off : off+uint64(ch.sendStride)]
}

// postCtl sends the n-byte IU in control slot slot; false if it could not be posted.
func (ch *channel) postCtl(slot int, n int) bool {
	ch.flushSends() // in order after the responses already queued
	if ch.noFlush {
		return false
	}
	off, _ := ch.ctlBuf(slot)
	sges := append(ch.sges[:0], ib.SGE{MR: ch.mr, Offset: off, Length: uint32(n)})
	wrs := append(ch.wrs[:0], ib.SendWR{ID: idCtl | idLast | uint64(slot), Op: ib.OpSend, Signaled: true, SGL: sges})
	if _, err := ch.conn.PostSend(wrs); err != nil {
		ch.log.Debug("posting a target request failed", zap.Int("slot", slot), zap.Error(err))
		return false
	}
	ch.ctlBusy[slot] = true
	ch.sqFree--
	ch.sendBatches++
	ch.armWatchdog()
	return true
}

// sendTLogout sends SRP_T_LOGOUT (best effort: ib_srp only logs it).
func (ch *channel) sendTLogout(reason iu.TLogoutReason) {
	if ch.ctlBusy[ctlTLogout] || ch.sqFree < 1 || ch.state == chClosing || ch.connClosed {
		return
	}
	_, b := ch.ctlBuf(ctlTLogout)
	n := iu.TLogout(b).Encode(&iu.TLogoutFields{Reason: reason})
	ch.postCtl(ctlTLogout, n)
}

// maybeCredReq returns owed credits to an idle channel. Credits of requests that ended
// without a response (commands aborted by task management, possibly sent on another channel)
// normally ride on the channel's next SRP_RSP; a channel with nothing outstanding sends no
// response, and an initiator left with one credit (kept for task management) could send no
// command to get one. So when no request of the channel is in progress and credits are owed,
// they go back in an SRP_CRED_REQ. One is outstanding at a time (ib_srp has one send buffer
// for its answer); the next waits for the SRP_CRED_RSP, meanwhile owed credits ride on
// responses again. Credits granted stay within the receive buffers posted less the spare one
// that takes the SRP_CRED_RSP.
func (ch *channel) maybeCredReq() {
	if ch.ledger.pending == 0 || ch.busy > 0 || ch.state != chLive || ch.connClosed ||
		ch.credReqOut || ch.ctlBusy[ctlCredReq] || ch.sqFree < 1 {
		return
	}
	delta := ch.ledger.credit(ch.recvPosted - spareRecvs)
	if delta == 0 {
		return
	}
	ch.credReqTag++
	_, b := ch.ctlBuf(ctlCredReq)
	n := iu.CredReq(b).Encode(&iu.CredReqFields{ReqLimDelta: delta, Tag: ch.credReqTag})
	// Counted before the SEND: the initiator may see it before PostSend returns.
	ch.t.stats.credReqs.Add(1)
	ch.credReqOut = true
	if !ch.postCtl(ctlCredReq, n) {
		ch.noFlush = true
		ch.beginClose("post failed")
		return
	}
	ch.log.Debug("returned owed credits with SRP_CRED_REQ", zap.Uint32("delta", delta), zap.Uint64("tag", uint64(ch.credReqTag)))
}

// onCredRsp handles the initiator's SRP_CRED_RSP (it takes no credit).
func (ch *channel) onCredRsp(b []byte) {
	if err := iu.CredRsp(b).Validate(); err != nil {
		ch.log.Warn("malformed SRP_CRED_RSP ignored", zap.Error(err))
		return
	}
	tag := iu.CredRsp(b).Tag()
	if !ch.credReqOut || tag != ch.credReqTag {
		ch.log.Warn("SRP_CRED_RSP answers no outstanding SRP_CRED_REQ: ignored",
			zap.Uint64("tag", uint64(tag)), zap.Bool("outstanding", ch.credReqOut), zap.Uint64("expected", uint64(ch.credReqTag)))
		return
	}
	ch.credReqOut = false
}

// protocolError closes the channel after an initiator violated the protocol.
func (ch *channel) protocolError(reason iu.TLogoutReason, what string) {
	ch.t.stats.protocolErrors.Add(1)
	ch.log.Warn("protocol violation: logging the initiator out and closing the channel",
		zap.String("what", what), zap.Stringer("t_logout_reason", reason))
	ch.sendTLogout(reason)
	ch.beginClose("protocol violation: " + what)
}

// beginClose disconnects the channel; run then drains it and tears it down.
func (ch *channel) beginClose(why string) {
	if ch.state == chClosing {
		return
	}
	if ch.noFlush {
		ch.batch, ch.batchSGEs = ch.batch[:0], ch.batchSGEs[:0]
	} else {
		ch.flushSends() // before the QP leaves RTS: queued work then completes or flushes
	}
	if ch.state == chClosing {
		return // flushSends failed and closed the channel
	}
	ch.state = chClosing
	ch.closing.Store(true)
	ch.closeReason = why
	ch.log.Info("closing channel", zap.String("reason", why))
	if !ch.connClosed {
		if err := ch.conn.Disconnect(); err != nil {
			if errors.Is(err, ib.ErrDeviceRemoved) {
				ch.noFlush = true
			} else if !errors.Is(err, ib.ErrClosed) {
				ch.log.Warn("disconnect failed", zap.Error(err))
			}
		}
	}
	for ch.bufHead != nil {
		c := ch.bufHead
		ch.popBuf()
		ch.finish(c, false)
	}
	for ch.sqHead != nil {
		c := ch.sqHead
		ch.sqHead = c.next
		c.next = nil
		ch.finish(c, false)
	}
	ch.sqTail = nil
	for ch.heldHead != nil {
		c := ch.heldHead
		ch.heldHead = c.next
		c.next = nil
		ch.finish(c, false)
	}
	ch.heldTail = nil
	ch.waitRecv = ch.waitRecv[:0]
	if last := ch.sess.remove(ch); last && !ch.detached.Load() {
		if m := ch.sess.lunMap.Load(); m != nil {
			sess := ch.sess
			done := sess.startReset()
			ch.wg.Add(1)
			go func() {
				defer ch.wg.Done()
				defer close(done)
				m.NexusReset(sess.nexus)
			}()
			ch.log.Info("last channel of the I_T nexus closed: nexus reset")
		}
	}
	ch.drainAt = time.Now().Add(ch.t.lim.DrainTimeout)
	ch.armTimer(ch.drainAt)
}

// drained reports whether a closing channel may be torn down.
func (ch *channel) drained() bool {
	if ch.execCount > 0 {
		return false
	}
	if ch.noFlush {
		return true
	}
	return ch.sendBatches == 0 && ch.recvPosted == 0 && ch.busy == 0
}

// forceRelease closes the queue pair when no flush completions will come (device removed, a
// failed post, or the drain timeout) and releases every context that is not with a worker:
// after Close the queue pair no longer uses their memory.
func (ch *channel) forceRelease() {
	ch.batch, ch.batchSGEs = ch.batch[:0], ch.batchSGEs[:0]
	if err := ch.conn.Close(); err != nil {
		ch.log.Warn("closing the queue pair", zap.Error(err))
	}
	ch.connClosed = true
	for i := range ch.ctxs {
		c := &ch.ctxs[i]
		if c.stage == stageExec || c.stage == stageTMF {
			continue
		}
		if c.state() != ctxFree || c.buf.valid() || c.table.valid() || c.recv >= 0 {
			ch.finish(c, false)
		}
	}
	ch.sendBatches, ch.recvPosted = 0, 0
}

// teardown releases everything once the channel is drained.
func (ch *channel) teardown() {
	ch.closing.Store(true)
	close(ch.work)
	close(ch.tmfWork)
	ch.wg.Wait()
	if !ch.connClosed {
		if err := ch.conn.Close(); err != nil {
			ch.log.Warn("closing the queue pair", zap.Error(err))
		}
		ch.connClosed = true
	}
	// After Close nothing of ours is in use by the queue pair: release what flushes did not.
	for i := range ch.ctxs {
		c := &ch.ctxs[i]
		if c.state() != ctxFree || c.buf.valid() || c.table.valid() || c.recv >= 0 {
			ch.finish(c, false)
		}
	}
	ch.timer.Stop()
	ch.pool.unregister(ch.wake)
	if ch.bufWaiting {
		ch.bufWaiting = false
		ch.pool.waiting.Add(-1)
	}
	ch.release()
	ch.t.stats.channelsOpen.Add(-1)
	ch.t.stats.channelsClosed.Add(1)
	ch.log.Info("channel closed", zap.String("reason", ch.closeReason))
	close(ch.closedCh)
	ch.t.removeChannel(ch)
}

// creditLedger is the channel's request limit bookkeeping (SRP r16a REQUEST LIMIT DELTA). The
// initiator spends one credit per SRP_CMD and SRP_TSK_MGMT; every SRP_RSP gives back its
// REQUEST LIMIT DELTA. The target answers each request with a delta of 1 plus the credits of
// requests that ended without a response (aborted commands: ib_srp forgets them without
// getting their credit back, LIO's pending delta). The invariant: credits the initiator holds
// never exceed the receive buffers posted, or an IU could arrive with no buffer for it.
type creditLedger struct {
	granted int64  // credits the initiator holds, as far as the target knows
	pending uint32 // owed for requests that ended without a response
}

// consume records a request's arrival; true when the initiator had no credit for it.
func (l *creditLedger) consume() (overdrawn bool) {
	l.granted--
	return l.granted < 0
}

// owe records a request that ends without a response (its receive buffer is posted again).
func (l *creditLedger) owe() { l.pending++ }

// respond returns the REQUEST LIMIT DELTA of the next response and records the grant; ok is
// false when it would leave the initiator more credits than the posted receive buffers. The
// channel passes the receive buffers posted less the spare one kept for an SRP_CRED_RSP.
func (l *creditLedger) respond(posted int) (delta uint32, ok bool) {
	delta = 1 + l.pending
	l.pending = 0
	l.granted += int64(delta)
	return delta, l.granted <= int64(posted)
}

// credit returns the REQUEST LIMIT DELTA of an SRP_CRED_REQ: the owed credits, as many as the
// posted receive buffers (as for respond) can back, and records the grant. Zero means there is
// nothing to send.
func (l *creditLedger) credit(posted int) uint32 {
	room := int64(posted) - l.granted
	if l.pending == 0 || room <= 0 {
		return 0
	}
	d := min(int64(l.pending), room)
	l.pending -= uint32(d)
	l.granted += d
	return uint32(d)
}

// nanotime is a monotonic clock in nanoseconds.
func nanotime() int64 { return int64(time.Since(clockBase)) }

var clockBase = time.Now()
