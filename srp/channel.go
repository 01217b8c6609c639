package srp

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/internal/loglimit"
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

// stopMode is how another goroutine asks a channel to close (requestStop).
type stopMode int32

const (
	stopNone stopMode = iota
	stopGraceful
	stopHard
)

// stopReq is a stop request: the strongest mode asked so far, with the reason of the last
// request.
type stopReq struct {
	mode   stopMode
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
	src    *source // the source address's share (share.go)
	id     uint64
	log    *zap.Logger
	conn   ib.Conn
	pool   *bufPool
	remote netip.AddrPort
	// ibSrc is the initiator's InfiniBand address when it logged in through an AF_IB
	// listener (its access is decided on it, not on remote).
	ibSrc *ib.IBAddr

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
	stop      atomic.Pointer[stopReq] // requestStop: read by the channel goroutine (checkStop)
	closing   atomic.Bool             // phase >= phaseClosing (setPhase): workers skip execution
	detached  atomic.Bool             // replaced by a SINGLE login: its closing is not a nexus loss
	abortScan atomic.Bool
	closedCh  chan struct{}
	wg        sync.WaitGroup

	// Owned by the channel goroutine.
	phase    chPhase // set only through setPhase
	free     []*cmdCtx
	waitRecv []parkedIU // IUs received while no context was free
	// The three queues a command can wait in, each in arrival order: for a data buffer, for
	// send-queue slots, and for the channel's task management functions to finish (commands
	// that arrived after one must not be caught by it in the logical unit).
	bufQ       ctxQueue
	sqQ        ctxQueue
	tmfWaitQ   ctxQueue
	bufWaiting bool // counted in the pool's waiting channels (bufQ not empty)
	tmfActive  int  // task management functions of this channel in progress
	// recvPosted counts the receive buffers posted or queued in recvQ: the queued ones are
	// posted (flushRecvs) before anything that grants their credits is.
	recvPosted  int
	recvQ       []ib.RecvWR
	sendBatches int
	sqFree      int
	ledger      creditLedger
	// handedOff counts the contexts a worker or the task management goroutine holds: the
	// channel cannot release them until they come back through done. commands counts the
	// SRP_CMDs the target works on, from acceptance (startCmd) to release, not those the
	// transport answers itself: a graceful shutdown waits for them, and operators see them
	// (pubActive). Contexts in use at all are len(ctxs) - len(free) (ctxInUse).
	handedOff   int
	commands    int
	ctlBusy     [ctlSendSlots]bool
	credReqOut  bool // an SRP_CRED_REQ waits for its SRP_CRED_RSP
	credReqTag  iu.Tag
	timer       *time.Timer
	timerAt     time.Time
	timerArmed  bool
	drainAt     time.Time
	closeReason string
	fake        *manualClock // scripted tests: the clock (now, nanos); nil in production
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
	// waiter is the connection's ib.Waiter when the channel goroutine sleeps in its Serve
	// (set before the goroutines start; nil otherwise); serving: it does now; stepFn is
	// step, made once. sleeping is set while the channel goroutine sleeps in Serve, or is
	// about to: whoever hands it work then interrupts the sleep (handOff). timerFired: the
	// timer went off (its function signals the channel). handed is set by whoever puts
	// something in done or wake, after the send, and cleared by takeReady once it has found
	// both empty: while it is clear, takeReady skips the select over them (handOff).
	waiter     ib.Waiter
	serving    bool
	over       bool // the channel is drained: run tears it down
	stepFn     func(bool) bool
	sleeping   atomic.Bool
	timerFired atomic.Bool
	handed     atomic.Bool
	// Adaptive (pollWindowOpen): the idle passes since the last work, and the clock when the
	// first of them read it (0: not read yet; -1: the window is over).
	idleSpins int
	lastWork  int64
	// busyPasses counts the passes since the channel last slept that were followed by
	// another instead of the arm (event mode, idle); passRecvs is the receive completions
	// the last poll took.
	busyPasses int
	passRecvs  int
	// pollNow is the clock (nanotime) read once per PollCompletions call that returned
	// completions, and the arrival time of all the IUs it delivered (scsi.LUStats latency,
	// which ends when the response is posted: responsesPosted reads the clock once per post).
	// One read per batch rather than per command, because clock reads are expensive where
	// the clocksource traps (pollWindowOpen); latencies come out late by at most the time
	// taken to handle one batch.
	pollNow int64

	// Contexts in stageSent (setStage): responses posted whose SEND completion has not been
	// reaped yet, and the commands among them (counted in commands until reaped, answered).
	// The send CQ is armed only when something else waits for it (sendsAwaited), so an idle
	// channel may keep the last responses' completions unreaped until its next wake-up.
	sent     int
	answered int

	// Data buffers held (bytes of pool blocks), taken from the session's and the source
	// address's shares (Limits.MaxInitiatorBuffer).
	bufHeld int64
	// The stall watchdog and the idle timeout (watchdog.go).
	watch    stallWatch
	iusIn    uint64    // IUs received
	idleAt   time.Time // next idle check; zero: Limits.IdleTimeout is off
	idleSeen uint64    // iusIn at the last idle check
	idleFrom time.Time // since when the channel was seen idle; zero: it was not
	// BUSY answers are logged at most once per busyLogEvery per channel, with a count.
	busyLog   loglimit.Window
	busyCount int
	// Refused commands are logged at most rejectLogBurst times per rejectLogEvery.
	refusedLog loglimit.Window
	// lastClock is the channel's latest wall-clock reading (Unix nanoseconds), taken when the
	// stall watchdog arms or checks: the session's last activity, without a clock read per
	// command (countIO).
	lastClock int64

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
	// ibSrc is the initiator's InfiniBand address, for a login through an AF_IB listener.
	ibSrc *ib.IBAddr
}

// newChannel allocates and registers everything a channel needs and builds its receive work
// requests; nothing is posted yet.
func newChannel(t *Target, sess *session, host *source, pool *bufPool, pd ib.ProtectionDomain, p channelParams, remote netip.AddrPort) (*channel, error) {
	lim := t.lim
	ch := &channel{
		t:       t,
		sess:    sess,
		src:     host,
		id:      t.chanID.Add(1),
		pool:    pool,
		remote:  remote,
		ibSrc:   p.ibSrc,
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
	ch.recvQ = make([]ib.RecvWR, 0, ch.nrecv)
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
	ch.recvPosted = ch.nrecv
	ch.ledger = creditLedger{granted: int64(ch.credits)}
	ch.busyLog = loglimit.Window{Burst: 1, Every: busyLogEvery}
	ch.refusedLog = loglimit.Window{Burst: rejectLogBurst, Every: rejectLogEvery}
	ch.timer = time.AfterFunc(time.Hour, ch.timerFire)
	ch.timer.Stop()
	src := zap.Stringer("src", remote)
	if p.ibSrc != nil {
		src = zap.Stringer("src", *p.ibSrc)
	}
	ch.log = sess.log.With(zap.Uint64("channel", ch.id), src)
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

// start launches the channel's goroutines on an accepted connection. A target with a
// startHook (scripted tests) hands the channel over instead: the test drives it through the
// same steps the goroutines take (pass, onDone, onTimer) and launches them at the end.
func (ch *channel) start(conn ib.Conn) {
	ch.conn = conn
	if a, ok := conn.(ib.NotifyArmer); ok && ch.t.lim.Completion != CompletionPoll {
		ch.armer = a
		if w, ok := conn.(ib.Waiter); ok && !ch.t.readyWait {
			ch.waiter, ch.stepFn = w, ch.step
		}
	}
	ch.pool.register(ch)
	ch.startIdleWatch()
	if ch.t.startHook != nil {
		ch.t.startHook(ch)
		return
	}
	ch.launch()
}

// launch starts the workers, the task management goroutine and the channel goroutine.
func (ch *channel) launch() {
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
	ch.handOff()
}

// handBack gives c back to the channel goroutine (a worker's or the task management
// goroutine's finished context): the send on done and its handOff, always together.
func (ch *channel) handBack(c *cmdCtx) {
	ch.done <- c
	ch.handOff()
}

// handOff tells the channel goroutine, after a send on done or wake, that something waits
// there: it sets handed, and interrupts the goroutine's sleep in the connection's Serve if it
// sleeps there or is about to. The sleeper sets sleeping before its last look at handed, and
// the sender looks at sleeping after setting handed (both sequentially consistent atomics):
// one of the two sees the other.
func (ch *channel) handOff() {
	ch.handed.Store(true)
	if ch.sleeping.Load() {
		ch.waiter.Interrupt()
	}
}

// timerFire is the timer's function: the channel goroutine runs onTimer (takeReady).
func (ch *channel) timerFire() {
	ch.timerFired.Store(true)
	ch.signal()
}

// requestStop asks the channel to close: gracefully (SRP_T_LOGOUT, drain, disconnect) or at
// once. logout is the SRP_T_LOGOUT reason sent before disconnecting. A request never weakens
// an earlier one: a graceful request after a hard one stays hard.
func (ch *channel) requestStop(mode stopMode, why string, logout iu.TLogoutReason) {
	for {
		cur := ch.stop.Load()
		req := &stopReq{mode: mode, why: why, logout: logout}
		if cur != nil && cur.mode > mode {
			req.mode = cur.mode
		}
		if ch.stop.CompareAndSwap(cur, req) {
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
		ch.handBack(c)
	}
}

// run is the channel goroutine: passes of work, and between them a wait for the next thing
// to do (a completion event, a context back from a worker, a wake-up, the timer). It sleeps
// in the connection's Serve while the queue pair is open, if the connection offers one, and
// in a select on Ready and its own channels otherwise.
func (ch *channel) run() {
	defer ch.teardown()
	if ch.waiter != nil && ch.serve() {
		return
	}
	for {
		worked, over := ch.pass()
		if over {
			return
		}
		// What is already there is taken without sleeping.
		if ch.takeReady() {
			continue
		}
		if ch.qpOpen() && !ch.idle(worked) {
			continue
		}
		ch.busyPasses = 0
		ch.block()
	}
}

// serve runs the channel's loop under the connection's Serve (ib.Waiter) and reports whether
// the channel is drained. It returns when the queue pair is closed (the rest of the close
// has no completions to wait for) or the connection is released under it (the device went:
// the loop goes on with Ready, which holds the event).
func (ch *channel) serve() bool {
	ch.serving = true
	err := ch.waiter.Serve(ch.stepFn)
	ch.serving = false
	ch.sleeping.Store(false)
	if err != nil && !ch.over {
		ch.log.Debug("waiting on the connection ended; waiting on Ready", zap.Error(err))
	}
	return ch.over
}

// step is one wake-up of the channel goroutine under Serve: the loop of run until there is
// nothing left to do, then (false) the sleep. ready: completion or connection events were
// taken.
func (ch *channel) step(ready bool) (done bool) {
	ch.sleeping.Store(false)
	if ready {
		ch.notifyArmed = false
	}
	for {
		worked, over := ch.pass()
		if over {
			ch.over = true
			return true
		}
		if !ch.qpOpen() {
			return true
		}
		if ch.takeReady() || !ch.idle(worked) {
			continue
		}
		ch.sleeping.Store(true)
		if ch.takeReady() {
			ch.sleeping.Store(false)
			continue
		}
		ch.busyPasses = 0
		return false
	}
}

// pass does everything the channel can do without waiting: completions and connection events,
// stop requests, commands claimed by task management, buffer waiters, owed credits, the
// moves of a closing channel, and the work requests queued meanwhile (one post). It reports
// whether it found completions or events, and whether the channel is drained and may be torn
// down.
func (ch *channel) pass() (worked, over bool) {
	worked = ch.poll()
	ch.checkStop()
	if ch.abortScan.Swap(false) {
		ch.scanAborted()
	}
	if !ch.bufQ.empty() {
		ch.retryBufWaiters()
	}
	ch.maybeCredReq()
	if ch.phase == phaseDraining && ch.commands == 0 {
		ch.beginClose("target shutdown: all commands done")
	}
	if ch.phase == phaseAbandoned {
		ch.forceRelease()
	}
	if ch.closed() && ch.drained() {
		return worked, true
	}
	ch.flushSends()
	ch.publish()
	return worked, false
}

// readyC is the channel of the connection's completion and event notifications, nil once the
// queue pair is closed and while the channel waits in Serve.
func (ch *channel) readyC() <-chan struct{} {
	if !ch.qpOpen() || ch.serving {
		return nil
	}
	return ch.conn.Ready()
}

// takeReady handles one thing that is already waiting, if any, without sleeping.
//
// While the goroutine runs under the connection's Serve, or once the queue pair is closed,
// Ready is not among the channels it looks at, and done and wake are looked at only when
// handed says something was put there since they were last found empty: a select over
// channels takes and releases each channel's lock, and the loop asks several times per
// wake-up, nearly always in vain (docs/benchmarks.md, "What the measurements showed").
func (ch *channel) takeReady() bool {
	if ch.timerFired.Load() && ch.timerFired.Swap(false) {
		if ch.timerArmed && ch.fake == nil {
			ch.timerArmed = false
			ch.onTimer()
		}
		return true
	}
	ready := ch.readyC()
	if ready != nil {
		return ch.takeOne(ready)
	}
	if !ch.handed.Load() {
		return false
	}
	if ch.takeOne(nil) {
		return true
	}
	// Both found empty: clear handed, and look once more if it was set, for what was put
	// there between that look and the clear (its sender set handed after its send, and the
	// Swap observes that).
	return ch.handed.Swap(false) && ch.takeOne(nil)
}

// takeOne takes one thing from ready (nil: none), done or wake, without sleeping.
func (ch *channel) takeOne(ready <-chan struct{}) bool {
	select {
	case <-ready:
		ch.notifyArmed = false
	case c := <-ch.done:
		ch.onDoneAll(c)
		ch.noteWork()
	case <-ch.wake:
	default:
		return false
	}
	return true
}

// block sleeps until there is something to do, and handles it (the timer signals wake).
func (ch *channel) block() {
	select {
	case <-ch.readyC():
		ch.notifyArmed = false
	case c := <-ch.done:
		ch.onDoneAll(c)
	case <-ch.wake:
	}
}

// publish makes the channel's commands in progress and credits visible to Target.Sessions:
// two loads and, when a value changed, a store, once per pass of the loop.
func (ch *channel) publish() {
	if a := int32(ch.commands - ch.answered); ch.pubActive.Load() != a {
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
	if ch.t.lim.Completion == CompletionEvent && ch.passRecvs > 1 && ch.busyPasses < busyPassesMax {
		// The pass took more than one request: the initiator is streaming. Another pass
		// before arming takes those that arrived while this one posted (soft-RoCE posts
		// inside the system call) now, instead of after an arm, an event, its read and a
		// wake-up: the system calls a busy channel makes per wake-up. A request at a time
		// (queue depth 1) arms at once, without an empty poll.
		ch.busyPasses++
		return false
	}
	return !ch.arm()
}

// busyPassesMax bounds the passes a channel makes in a row before it arms and sleeps: the
// sleep is where the other channels' goroutines get the CPU.
const busyPassesMax = 4

// arm arms the completion queues before the channel sleeps, unless they are armed already or
// the connection arms itself, and reports whether it did: the caller then polls once more.
func (ch *channel) arm() bool {
	if ch.armer == nil || ch.notifyArmed {
		return false
	}
	if err := ch.armer.ArmNotify(ch.sendsAwaited()); err != nil {
		// Closed or removed: the connection's events still signal Ready.
		return false
	}
	ch.notifyArmed = true
	return true
}

// sendsAwaited reports whether the channel must be woken by its next send-queue completion
// (ib.NotifyArmer): when anything but responses on their way is outstanding (RDMA READs of
// data-out or of a descriptor table, a control IU), something waits for what a send
// completion gives back (send-queue slots, a context, data buffers, here or on another
// channel sharing the pool), credits are owed (an SRP_CRED_REQ waits for all contexts to be
// free), or the channel is not live. Otherwise the completions of its responses only release
// their contexts and buffers, and are reaped on the next wake-up, usually the next command's
// arrival: one wake-up per command instead of two.
func (ch *channel) sendsAwaited() bool {
	return ch.phase != phaseLive || ch.sendBatches > ch.sent ||
		!ch.bufQ.empty() || !ch.sqQ.empty() || len(ch.waitRecv) > 0 ||
		ch.ledger.pending > 0 || ch.pool.waiting.Load() > 0
}

// noteWork opens a new poll window (adaptive): the channel found work.
func (ch *channel) noteWork() { ch.idleSpins, ch.lastWork = 0, 0 }

// pollWindowOpen counts an idle pass of an adaptive channel and reports whether its poll
// window is still open. The clock is read once per clockEvery passes, not on every one: in a
// VM whose clocksource is the HPET (as TCG guests with more than one vCPU get) each read is a
// system call and a trapped device access, and reading it on every pass cost the daemon an
// eighth of its CPU time. The first read starts the window; once it is over it stays over
// until noteWork.
func (ch *channel) pollWindowOpen() bool {
	if ch.lastWork < 0 {
		return false
	}
	ch.idleSpins++
	if ch.idleSpins%clockEvery != 0 {
		return true
	}
	now := ch.nanos()
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

// manualClock is the clock of scripted tests: it moves only when the script says.
type manualClock struct{ now time.Time }

// now is the channel's wall clock: the real one, or a script's.
func (ch *channel) now() time.Time {
	if ch.fake != nil {
		return ch.fake.now
	}
	return time.Now()
}

// nanos is the channel's monotonic clock in nanoseconds (nanotime, or a script's).
func (ch *channel) nanos() int64 {
	if ch.fake != nil {
		return int64(ch.fake.now.Sub(clockBase))
	}
	return nanotime()
}

// ctxInUse is the number of contexts not on the free list.
func (ch *channel) ctxInUse() int { return len(ch.ctxs) - len(ch.free) }

// nanotime is a monotonic clock in nanoseconds.
func nanotime() int64 { return int64(time.Since(clockBase)) }

var clockBase = time.Now()
