package srp

import (
	"net/netip"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/lib/loglimit"
	"github.com/srptarget/srptarget/srp/iu"
)

// Work request IDs: the kind in the top two bits; for commands the context index in the low 32
// bits and idLast on the last work request of a batch (the one that always completes: signaled
// on success, flushed or failed otherwise); for receives the buffer index, and idShared on a
// buffer of the poll group's shared receive queue.
const (
	idKindMask  uint64 = 3 << 62
	idRecv      uint64 = 0 << 62
	idCmd       uint64 = 1 << 62
	idCtl       uint64 = 2 << 62
	idLast      uint64 = 1 << 40
	idShared    uint64 = 1 << 41
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

// channel is one RDMA channel (RC queue pair) of a session. Its poll group's goroutine runs it
// (group.go): it hands the channel its completions, and the channel parses IUs, posts RDMA and
// responses, and keeps all per-channel accounting without locks. SCSI commands of logical
// units that block run on the group's workers; task management on a goroutine of its own (it
// blocks until the commands it aborts have stopped). Both hand contexts back through the
// group's inbox.
type channel struct {
	t    *Target
	sess *session
	src  *source // the source address's share (share.go)
	g    *pollGroup
	dev  *groupDev
	id   uint64
	log  *zap.Logger
	conn ib.Conn
	pool *bufPool
	// remote is the initiator's address; ibSrc its InfiniBand address when it logged in
	// through an AF_IB listener (its access is decided on it, not on remote).
	remote netip.AddrPort
	ibSrc  *ib.IBAddr

	channelGeom
	crossing

	// Owned by the group goroutine.
	phase    chPhase // set only through setPhase
	ctxs     []cmdCtx
	free     []*cmdCtx
	waitRecv []parkedIU // IUs received while no context was free
	// The three queues a command can wait in, each in arrival order: for a data buffer, for
	// send-queue slots, and for the channel's task management functions to finish (commands
	// that arrived after one must not be caught by it in the logical unit).
	bufQ       ctxQueue
	sqQ        ctxQueue
	tmfWaitQ   ctxQueue
	bufWaiting bool // counted in the pool's waiting channels (bufQ not empty)
	tmf        tmfRunner
	ledger     creditLedger
	channelCounts
	sendBatch
	timer       channelTimer
	closeReason string
	drainAt     time.Time
	fake        *manualClock // scripted tests: the clock (now, nanos); nil in production
	creditWarn  bool
	groupLink
	// The stall watchdog and the idle timeout (watchdog.go).
	watch stallWatch
	idle  idleWatch
	logs  channelLogs
	pub   channelPub
}

// groupLink is what the channel's poll group keeps of it between and within passes, touched
// only by the group goroutine.
type groupLink struct {
	// started: the group runs the channel (its connection is accepted); touched: it is in the
	// group's list for this pass; early: its completions that came before it started;
	// wantSends: counted in the group's sendsWanted.
	started, touched, wantSends bool
	early                       []ib.Completion
	// pollNow is the clock (nanotime) read once per CQ poll that returned completions, and
	// the arrival time of all the IUs it delivered (scsi.LUStats latency). One read per batch
	// rather than per command: latencies come out late by at most one batch's handling.
	pollNow int64
}

// channelGeom is what the login negotiated and the memory sized from it: immutable once the
// channel runs.
type channelGeom struct {
	credits    int // granted at login
	nrecv      int // receive buffers of its own: credits + spareRecvs (0 on a shared queue)
	nctx       int
	sqDepth    int
	maxDesc    int
	maxIT      uint32
	maxTI      uint32
	immOff     uint16 // 0: immediate data not granted
	sendStride int
	slab       *ib.Slab
	mr         ib.MR
	mem        []byte
	rq         *recvRing // where its IUs land: its own receive queue or the group's shared one
	queues     *channelQueues
	ctlOff     uint64
	// inline is the largest SRP_RSP sent inline (the QP's max inline data; 0: none).
	inline int
}

// crossing is what other goroutines touch: stop requests, the phase as far as workers care,
// task management's claims, and the flags that say why the group should run the channel.
type crossing struct {
	stop      atomic.Pointer[stopReq] // requestStop: read by the channel (checkStop)
	closing   atomic.Bool             // phase >= phaseClosing (setPhase): workers skip execution
	detached  atomic.Bool             // replaced by a SINGLE login: its closing is not a nexus loss
	abortScan atomic.Bool             // task management claimed commands (scanAborted)
	queued    atomic.Bool             // in the group's inbox
	events    atomic.Bool             // a connection event waits (ib.AcceptParams.OnEvent)
	fired     atomic.Bool             // the timer went off
	resetting atomic.Bool             // the nexus reset of its close runs
	closedCh  chan struct{}
}

// channelCounts are the channel's counters of work in progress.
type channelCounts struct {
	// recvPosted counts the receive buffers of its own posted or queued in the ring (queued
	// ones are posted before anything that grants their credits is); rqHeld the shared
	// receive buffers it holds.
	recvPosted int
	rqHeld     int
	sqFree     int
	// handedOff counts the contexts a worker or task management holds: the channel cannot
	// release them until they come back. commands counts the SRP_CMDs the target works on,
	// from acceptance (startCmd) to release, not those the transport answers itself: a
	// graceful shutdown waits for them, and operators see them (pub.active).
	handedOff int
	commands  int
	// sent and answered: contexts in stageSent (responses posted whose SEND completion has
	// not been reaped yet) and the commands among them. The send CQ is armed only when
	// something else waits for it (sendsAwaited), so an idle channel may keep the last
	// responses' completions unreaped until its group's next wake-up.
	sent     int
	answered int
	// bufHeld: data buffers held (bytes of pool blocks), taken from the session's and the
	// source address's shares (Limits.MaxInitiatorBuffer).
	bufHeld    int64
	ctlBusy    [ctlSendSlots]bool
	credReqOut bool // an SRP_CRED_REQ waits for its SRP_CRED_RSP
	credReqTag iu.Tag
}

// sendBatch is the work requests queued by this pass, posted together by flushSends: one
// ibv_post_send for all the responses of a pass, at most batchMax work requests (one
// command's chain always fits: at most maxDesc RDMA WRITEs and the response SEND). wrs and
// sges are where one command's chain is built, the group's scratch (pollGroup.scratch).
type sendBatch struct {
	sendBatches int // batches posted and not completed
	wrs         []ib.SendWR
	sges        []ib.SGE
	batch       []ib.SendWR
	batchSGEs   []ib.SGE
	batchMax    int
}

// channelTimer is the channel's one timer (buffer waits, the watchdog, the idle check, the
// drain deadline): its function sets fired and signals the group.
type channelTimer struct {
	t     *time.Timer
	at    time.Time
	armed bool
}

// channelLogs rate-limits what a peer can make the channel log: BUSY answers, at most once
// per busyLogEvery with a count, and refused commands, rejectLogBurst per rejectLogEvery.
type channelLogs struct {
	busy      loglimit.Window
	busyCount int
	refused   loglimit.Window
}

// idleWatch is the idle timeout's state (watchdog.go): the IUs received, the next check (zero:
// Limits.IdleTimeout is off), the IUs seen at the last check, and since when the channel was
// seen idle (zero: it was not).
type idleWatch struct {
	iusIn uint64
	at    time.Time
	seen  uint64
	from  time.Time
}

// channelPub is what operators see (Target.Sessions): loginAt and qpn are set before the
// channel runs; active and granted are copies of the commands in progress and the credits
// granted that the channel publishes once per pass (publish), so that reading them takes no
// lock on the I/O path. lastClock is the latest wall-clock reading (Unix nanoseconds), taken
// when the stall watchdog arms or checks: the session's last activity without a clock read
// per command (countIO).
type channelPub struct {
	loginAt   time.Time
	qpn       uint32
	active    atomic.Int32
	granted   atomic.Int64
	lastClock int64
}

// busyLogEvery is how often a channel may log that it answered BUSY for want of a buffer.
const busyLogEvery = 10 * time.Second

// clockEvery is how many idle passes of an adaptive group go by between clock reads.
const clockEvery = 32

// signal asks the group to run the channel (from any goroutine).
func (ch *channel) signal() { ch.g.signal(ch) }

// timerFire is the timer's function: the group runs onTimer (service).
func (ch *channel) timerFire() {
	ch.fired.Store(true)
	ch.signal()
}

// onEvent is the connection's event callback (ib.AcceptParams.OnEvent).
func (ch *channel) onEvent() {
	ch.events.Store(true)
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

// service does everything the channel can do in a pass of its group once its completions
// are handled: connection events, the timer, stop requests, commands claimed by task
// management, buffer waiters, owed credits, the moves of a closing channel, and the work
// requests queued meanwhile (one post). It reports whether the channel is drained and may be
// torn down.
func (ch *channel) service() (over bool) {
	if ch.events.Load() && ch.events.Swap(false) {
		ch.pollEvents()
	}
	if ch.fired.Load() && ch.fired.Swap(false) && ch.timer.armed && ch.fake == nil {
		ch.timer.armed = false
		ch.onTimer()
	}
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
		return true
	}
	ch.flushSends()
	ch.publish()
	ch.g.noteSends(ch)
	return false
}

// pollEvents takes the connection's events.
func (ch *channel) pollEvents() {
	if !ch.qpOpen() {
		return
	}
	for {
		ev, ok := ch.conn.PollEvent()
		if !ok {
			return
		}
		switch ev {
		case ib.EventEstablished:
			ch.log.Debug("connection established")
		case ib.EventDisconnected:
			ch.beginClose("initiator disconnected")
		case ib.EventDeviceRemoved:
			ch.abandon("RDMA device removed")
		}
	}
}

// reap polls the group's completion queues, so that the channel's completions that have come
// are taken: the stall watchdog and the idle check look at the channel only after.
func (ch *channel) reap() {
	for _, q := range ch.g.cqs {
		ch.g.pollCQ(q)
	}
}

// publish makes the channel's commands in progress and credits visible to Target.Sessions:
// two loads and, when a value changed, a store, once per pass.
func (ch *channel) publish() {
	if a := int32(ch.commands - ch.answered); ch.pub.active.Load() != a {
		ch.pub.active.Store(a)
	}
	if g := ch.ledger.granted; ch.pub.granted.Load() != g {
		ch.pub.granted.Store(g)
	}
}

// sendsAwaited reports whether the channel must be woken by its next send-queue completion:
// when anything but responses on their way is outstanding (RDMA READs of data-out or of a
// descriptor table, a control IU), something waits for what a send completion gives back
// (send-queue slots, a context, data buffers, here or on another channel sharing the pool),
// credits are owed (an SRP_CRED_REQ waits for all contexts to be free), or the channel is not
// live. Otherwise the completions of its responses only release their contexts and buffers,
// and are reaped on the group's next wake-up, usually the next command's arrival: one wake-up
// per command instead of two.
func (ch *channel) sendsAwaited() bool {
	return ch.phase != phaseLive || ch.sendBatches > ch.sent ||
		!ch.bufQ.empty() || !ch.sqQ.empty() || len(ch.waitRecv) > 0 ||
		ch.ledger.pending > 0 || ch.pool.waiting.Load() > 0
}
