package srp

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/lib/loglimit"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
	"go.uber.org/zap"
)

// The engine's objects and how they point at one another, in one place as LIO keeps them in
// drivers/infiniband/ulp/srpt/ib_srpt.h: a Target owns a registry of sessions (I_T nexuses);
// a session's channels (RDMA queue pairs) each run on one poll group, which polls the
// completion queues its channels share on a device; a channel owns its command contexts. The
// methods live in the files of their concerns, which call only downward: see doc.go.

// Target is the SRP target engine: it accepts logins on ib.Listeners, runs one goroutine per
// RDMA channel that moves IUs and data, and hands SCSI commands to the LUN map the Authorizer
// chose for the initiator.
//
// Object model (as LIO's): Target → session (one per I_T nexus: initiator port identifier +
// target port identifier, with its scsi.Nexus, kept for the life of the target so that unit
// attentions survive relogins) → channel (one RC queue pair; several per session with
// multichannel logins) → command contexts (preallocated per channel).
type Target struct {
	io  backstoreIOState // how file and block LUNs are read and written (backstoreio.go)
	cfg Config
	lim Limits
	log *zap.Logger
	// ports maps each target port identifier the target accepts logins for to its SCSI
	// target port (Config.TargetPort and Config.MorePorts).
	ports  map[iu.PortID]*scsi.TargetPort
	auth   atomic.Pointer[authHolder]
	stats  counters
	chanID atomic.Uint64
	// seq numbers every SRP_CMD and SRP_TSK_MGMT in arrival order across channels, so that a
	// task management function affects only the commands that arrived before it.
	seq atomic.Uint64

	// loginSlots holds a token per login being handled (Limits.MaxLoginsInProgress).
	loginSlots chan struct{}
	// logLimit keeps floods of refused logins from flooding the log.
	logLimit *loglimit.Keyed

	// reg is the sessions and channels the target has admitted (registry.go).
	reg registry
	// pools are the data-buffer pools of the RDMA devices (pools.go).
	pools devicePools

	mu        sync.Mutex
	shutting  bool
	listeners map[ib.Listener]struct{}
	logins    sync.WaitGroup // login handlers in progress
	serving   sync.WaitGroup // Serve loops
	// groups run the channels' data path (group.go), each on its goroutine; groupsFillPs:
	// there are as many as Ps (GOMAXPROCS), none left for the network poller (spin).
	groups       []*pollGroup
	groupsFillPs bool

	// startHook, when set (scripted tests only), receives each accepted channel instead of
	// its goroutines being started: the test drives it step by step.
	startHook func(*channel)
	// scriptGroups, when set (scripted tests only), gives each channel a poll group of its
	// own that runs no goroutine (the test runs its loop).
	scriptGroups bool
}

type authHolder struct{ a Authorizer }

// registry is what the target has admitted: its sessions (one per I_T nexus, kept while the
// target lives unless one must make room for another), its channels, and each source
// address's share of them (share.go), each counted against its Limits.
type registry struct {
	lim        *Limits
	newSession func(nexusKey) *session

	mu     sync.Mutex
	closed bool // Shutdown: no channel is added any more
	// sessions are the I_T nexuses; channels the live channels of all of them.
	sessions map[nexusKey]*session
	channels map[*channel]struct{}
	// sources are the source addresses with logins or channels: each host's share of the
	// sessions, channels and buffers (share.go).
	sources sourceTable
	// chReserved counts channels of logins in progress that passed the MaxChannelsTotal check
	// and are not in channels yet.
	chReserved int
	live       sync.WaitGroup // channels added and not yet removed
}

// sourceTable is the source addresses with logins or channels. registry.mu guards it.
type sourceTable map[netip.Addr]*source

// source is one initiator host, by source address (its GID for a login on an AF_IB listener,
// written as an IPv6 address): the logins and channels it has, and the
// data buffers they hold. registry.mu guards everything but buf.
type source struct {
	addr netip.Addr
	// nexuses counts, per I_T nexus, the logins in progress and the channels reserved or
	// live from this address: a nexus counts against Limits.MaxSessionsPerSource while it
	// has either.
	nexuses  map[nexusKey]int
	channels int // channels reserved or live
	buf      bufShare
}

// nexusKey identifies an I_T nexus: (initiator port identifier, target port identifier).
type nexusKey struct {
	initiator, target iu.PortID
}

// session is one I_T nexus. It outlives its channels: the scsi.Nexus pointer must stay the same
// across relogins so that unit attentions (I_T NEXUS LOSS OCCURRED, REPORTED LUNS DATA HAS
// CHANGED) reach the initiator when it comes back. It is forgotten only when a new nexus needs
// room (Limits.MaxSessions): then the one without channels for the longest goes.
type session struct {
	key    nexusKey
	nexus  *scsi.Nexus
	log    *zap.Logger
	lunMap atomic.Pointer[scsi.LUNMap]
	// io is the session's I/O counters per LUN (iostats.go), with an entry for every LUN
	// lunMap has had.
	io atomic.Pointer[sessionIO]
	// buf is the data buffers the nexus's channels hold together (Limits.MaxInitiatorBuffer).
	buf bufShare
	// forgotten is Config.SessionForgotten.
	forgotten func(SessionIOInfo)

	// loginMu serialises logins of this nexus (a SINGLE login tears down the others).
	loginMu sync.Mutex
	nexusChannels

	// logins counts login handlers using the session (guarded by registry.mu): a session is
	// forgotten only when none is.
	logins int
}

// nexusChannels are the live channels of a nexus, and whether it is being reset after the loss
// of the last one.
type nexusChannels struct {
	mu       sync.Mutex
	channels []*channel // live channels, in login order
	src      netip.AddrPort
	// resetting is closed when the nexus reset that followed the loss of the last channel is
	// done; a login waits for it, so that a reset meant for the old channels' commands cannot
	// abort the new ones.
	resetting chan struct{}
	// idleSince is when the session last had no channel (its creation, or the loss of its
	// last channel): the oldest idle session is forgotten first.
	idleSince time.Time
}

// channel is one RDMA channel (RC queue pair) of a session. Its poll group's goroutine runs it
// (group_poll.go): it hands the channel its completions, and the channel parses IUs, posts RDMA and
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
	ctxs     ctxTable
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
	sendBufOff uint64 // the contexts' send buffers, nctx of sendStride bytes
	ctlOff     uint64
	// inline is the largest SRP_RSP sent inline (the QP's max inline data; 0: none).
	inline int
}

// channelQueues are a channel's places in its group's queues on its device.
type channelQueues struct {
	dev        *groupDev
	send, recv *groupCQ
	srq        *recvRing // nil: the channel has a receive queue of its own
	sqDepth    int
	nrecv      int
	qpn        uint32 // the QP's number, once known (registerQP); group goroutine
}

// cmdCtx is the preallocated state of one IU (SRP_CMD or SRP_TSK_MGMT) from its receive to
// its response's send completion. A channel has up to 2 × credits of them (ctxTable): a
// response's context is busy until its SEND completes, and the initiator may already have
// sent the next IU into the receive buffer the response gave back.
type cmdCtx struct {
	ch  *channel
	idx uint32

	// Read by task management on other goroutines.
	sg        atomic.Uint64 // generation << 8 | state
	seq       atomic.Uint64 // arrival order (Target.seq), so that task management spares later IUs
	tag       atomic.Uint64
	lun       atomic.Uint64
	lu        atomic.Pointer[scsi.LogicalUnit]
	abortDone chan struct{} // signalled when a ctxAbortedTMF context is released

	// Owned by the channel goroutine (and the worker while stageExec / stageTMF).
	stage     cmdStage
	recv      int32 // receive buffer holding the IU, -1 when none
	out, in   iu.DataBuf
	buf       poolBuf // data buffer
	table     poolBuf // external descriptor table
	batchWRs  int     // work requests of the batch in flight (0: none)
	real      bool    // a command the target works on (not answered by the transport)
	xportFail bool    // answered by the transport: no residuals
	lunMap    *scsi.LUNMap
	mapping   *scsi.Mapping     // lunMap's mapping of the command's LUN, nil when none
	luHold    *scsi.LogicalUnit // the logical unit this command holds (Hold), released when its response is posted or in finish
	cmd       scsi.Command
	tm        tmReq
	next      *cmdCtx // wait lists
	waitSince int64   // monotonic nanoseconds, buffer waits
	sendOff   uint64  // send buffer offset in the channel's region
	// abortSignaled: free signalled abortDone, which discardAbortSignal empties.
	abortSignaled bool

	// Per-logical-unit statistics (scsi.LUStats): the unit the command counts against (nil:
	// none, or not an SRP_CMD), when its IU arrived (channel.pollNow), its operation class,
	// and the data-in bytes its response carried.
	statLU  *scsi.LogicalUnit
	arrived int64
	class   scsi.OpClass
	written uint32
}

// tmReq is a task management request and its outcome.
type tmReq struct {
	seq     uint64 // arrival number: commands that arrived later are not affected
	fn      iu.TskMgmtFunc
	lun     uint64
	taskTag iu.Tag
	code    iu.TskMgmtRspCode
}

// ctxQueue is a FIFO of contexts linked through cmdCtx.next: the commands waiting for a data
// buffer, for send-queue slots, or for the channel's task management to finish. A context is
// in at most one queue at a time.
type ctxQueue struct {
	head, tail *cmdCtx
}

// tmfRunner runs the channel's task management functions one at a time, in arrival order,
// each on a goroutine of its own: a function blocks until the commands it aborts have
// stopped, which needs the group goroutine to go on.
type tmfRunner struct {
	active int      // functions of the channel in progress, queued or running
	queue  ctxQueue // waiting for the one that runs
	busy   bool     // one runs
}

// pollGroup runs the data path of the channels assigned to it on one goroutine, as SPDK's poll
// groups do (doc/nvmf_tgt_pg.md): it polls the completion queues it shares with them on each
// device (groupDev), hands each completion to its channel by QP number, runs the channels that
// have work, and posts once per channel per pass. A channel is assigned at login to the group
// with the fewest channels and stays there. The group polls while it finds work and, when it
// finds none, waits as Limits.Completion says: the whole group polls or sleeps, not each
// channel.
//
// Other goroutines reach a group only through its inbox (under mu): contexts that workers and
// task management give back (handBack), channels to look at (signal: a stop request, the
// timer, a connection event, buffers freed), QP numbers of channels being accepted and channels
// started. Each puts its item there, sets any and wakes the group if it sleeps (notify).
type pollGroup struct {
	t   *Target
	idx int
	log *zap.Logger
	// load counts the channels assigned (groupFor picks the least loaded).
	load atomic.Int32

	// The inbox and the devices, shared with other goroutines.
	mu          sync.Mutex
	devs        []*groupDev
	devsChanged bool
	inDone      []*cmdCtx
	inChans     []*channel
	inQPs       []qpReg
	inStart     []*channel
	stopping    bool
	running     bool
	any         atomic.Bool
	wake        chan struct{}
	exited      chan struct{}
	// sleeping: the group is parked, or about to, in its completion channels' Serve (waitOn
	// the one it serves) or on wake (waitOn nil); notify interrupts it then.
	sleeping atomic.Bool
	waitOn   atomic.Pointer[waitChan]

	// Owned by the group goroutine (or by a script's, which calls its steps).
	cqs   []*groupCQ // every CQ of every device, receive CQs first
	polls []cqPair   // the same CQs as each pass polls them: a device's receive and send CQ in one call
	ldevs []*groupDev
	chans []ib.CompChannel // the completion channel of each of ldevs; Serve waits on all
	// chansChanged: chans is not what the group serves (a device came or went); serving:
	// the pass runs inside Serve, where devices are not released (retireDevs after it).
	chansChanged bool
	serving      bool
	retired      []*groupDev // dropped in this pass, released at its end (retireDevs)
	sources      []pollSource
	active       []*channel // channels to run in this pass
	takeDone     []*cmdCtx
	takeCh       []*channel
	takeQPs      []qpReg
	takeNew      []*channel
	wcs          []ib.Completion
	pollNow      int64
	// Where the channels build one command's chain of work requests (channel.wrs, sges):
	// the group runs one channel at a time.
	wrs   []ib.SendWR
	sges  []ib.SGE
	wait  groupWait
	yield netYield // spin's park in the netpoller
	io    groupIO  // the io_uring of its file and block LUNs (group_io.go)
	// Workers: the goroutines that run commands of logical units that block (file, block,
	// rbd), started as needed, shared by the group's channels.
	work    *workSet
	workQ   []*cmdCtx    // what did not fit in work
	workers int          // in work
	queued  atomic.Int32 // commands handed to workers and not taken by one yet
	// script: driven by a test (Target.ScriptChannels): no goroutine, and what would go to a
	// worker or a task management goroutine waits in scriptWork and scriptTMF.
	script     bool
	scriptWork []*cmdCtx
	scriptTMF  []*cmdCtx
	clock      *manualClock
}

// pollSource is a source of completions other than the CQs, which a group serves on its
// goroutine: the io_uring of its backstores' requests (groupIO). reap, in every pass, takes
// what has completed without blocking, hands it to the channels (channel.onDone, or what the
// source's own requests need; group.touch for each channel it moved on) and reports whether
// it found anything; submit, at the end of every pass, hands the source's device what the
// pass started. Before the group sleeps arm makes the source's completions wake it (the
// function addSource returns wakes it, from any goroutine: one parked on the source's
// eventfd, say) and reports whether it had to, so that the group looks once more for what
// completed before; disarm undoes that once the group is awake.
type pollSource interface {
	reap() bool
	submit()
	arm() bool
	disarm()
}

// qpReg records that QP qpn of dev is channel ch's (ib.AcceptParams.OnQP).
type qpReg struct {
	dev *groupDev
	qpn uint32
	ch  *channel
}

// workQueue is the capacity of a group's work channel; more waits in workQ.
const workQueue = 1024

// cqPair is what one poll of a pass takes: a receive CQ and a send CQ of one device (b nil:
// a CQ alone).
type cqPair struct{ a, b *groupCQ }

// waitChan is the completion channel a sleeping group is parked in (pollGroup.waitOn).
type waitChan struct{ ch ib.CompChannel }

// groupDev is what a poll group has on one RDMA device (ib.SharedQueues): completion queues
// for the send queues of its channels there and for their receives, and the shared receive
// queue with its buffers (SPDK's per-poll-group poller: one CQ and one SRQ per device). A CQ
// must hold every completion that can be outstanding on it, so each channel reserves its queue
// depths in them at login; a CQ that is full gets a sibling (as the kernel's CQ pool does).
//
// The login goroutine makes and sizes them under the group's mutex; the group goroutine polls
// the CQs and owns the SRQ's posting, the QP numbers and everything else.
type groupDev struct {
	g     *pollGroup
	pd    ib.ProtectionDomain
	sq    ib.SharedQueues
	ch    ib.CompChannel // where its CQs raise their events
	send  []*groupCQ     // guarded by g.mu; the group goroutine polls a copy (pollGroup.cqs)
	recv  []*groupCQ
	srq   *recvRing // nil: no SRQ on this device (or limits.srq_depth 0)
	cache *bufCache // the group's cache of the device's data buffers
	byQPN qpnTable
	// last is the channel channelOf found last, of QP number lastQPN (nil: none).
	last    *channel
	lastQPN uint32
	chans   int // channels on it (g.mu)
}

// groupCQ is one completion queue with the entries not yet reserved.
type groupCQ struct {
	dev   *groupDev
	cq    ib.CQ
	room  int
	recvs bool // receive completions (else send-queue ones)
}

// groupIO is a poll group's io_uring (Limits.BackstoreIO io_uring): the reads, writes and
// flushes of its channels' commands on file and block logical units start in the pass that
// dispatches them (scsi.LUNMap.Start), reach the kernel in one system call at the end of the
// pass (submit), and are reaped in a later pass (reap), which moves each command on
// (scsi.LUNMap.Complete) to its response. No goroutine blocks per command: a command that
// would have to wait (scsi.Blocked: behind an ORDERED command, for a range COMPARE AND WRITE
// holds, for room in the ring) goes to a worker as every command of a blocking logical unit
// does with the sync engine.
//
// While the group sleeps with requests in flight, the ring signals an eventfd that a
// goroutine waits on in the netpoller, and that goroutine wakes the group; while the group is
// awake the signal is off (Queue.SignalEventfd), so that a busy group pays nothing for it.
type groupIO struct {
	g *pollGroup
	q *backstore.Queue // made on first use; nil with the sync engine or when it could not be
	// off: the sync engine, or the ring could not be made: commands go to workers.
	off bool
	// cmds holds by tag the command whose request is in flight; free the unused tags.
	cmds       []*cmdCtx
	free       []uint32
	inFlight   atomic.Int32  // commands with a request in flight
	started    atomic.Uint64 // commands Start took (tests, and the group's share of the work)
	bufs       ringBuffers
	wake       ringWake
	onComplete func(backstore.Completion)
	// holdReap, set by a test, keeps reap from reaping: commands stay pending in their
	// logical units as long as a slow disk would keep them.
	holdReap atomic.Bool
}

// workSet is the workers of a group between two retirements: where they take commands from,
// and how many wait there. A new set after a retirement, so that workers on their way out are
// not counted as idle ones of the next.
type workSet struct {
	ch   chan *cmdCtx
	idle atomic.Int32
}
