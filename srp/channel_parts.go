package srp

import (
	"sync/atomic"
	"time"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/lib/loglimit"
	"github.com/srptarget/srptarget/srp/iu"
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

// Target-initiated IUs, each with its own send buffer after the contexts' (slot index in the
// work request ID).
const (
	ctlTLogout   = 0 // SRP_T_LOGOUT
	ctlCredReq   = 1 // SRP_CRED_REQ
	ctlSendSlots = 2
)

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

// parkedIU is an IU that arrived (at nanotime at) while every context was busy.
type parkedIU struct {
	recv, n int32
	at      int64
}
