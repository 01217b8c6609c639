package srp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/internal/loglimit"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// The target engine (target.go, config.go, login.go, session.go, channel.go, cmd.go, pool.go,
// tmf.go) in one page:
//
// Login. A connection request carries the 56-byte (RDMA/CM TCP port space) or 64-byte (IB CM,
// AF_IB port space) SRP_LOGIN_REQ; the listener's port space says which (parseLogin). It is
// checked as LIO checks it (checkLogin), then the Authorizer picks the LUN map (a map that
// changed since the nexus's previous login establishes REPORTED LUNS DATA HAS CHANGED), then
// MULTI-CHANNEL ACTION is applied (single: the nexus's channels are terminated and
// the nexus reset; multi: the channel joins, up to Limits.MaxChannels). The channel's memory
// is registered and its receive buffers are posted in AcceptParams.Recv before the REP goes
// out. Every refusal is an SRP_LOGIN_REJ with the reason ib_srp understands and a log line
// saying what to change.
//
// Channel. One goroutine per queue pair polls completions and events and owns all channel
// state without locks. Each received SRP_CMD or SRP_TSK_MGMT takes a preallocated context
// (2 × credits of them) and keeps its receive buffer until its response is posted: the CDB
// and, for immediate data, the data-out bytes are used in place. Data buffers come from a pool
// registered once per device (pool.go); data-out arrives by RDMA READ (external descriptor
// tables are fetched first) into that buffer, the command runs on a worker goroutine (scsi
// LUNMap.Execute reads and writes the buffer directly), and the data-in RDMA WRITEs go out
// with the SRP_RSP SEND in one chain, only the SEND signaled. The steady-state path allocates
// nothing.
//
// Credits. The login grants one credit per receive buffer but one: the spare takes the
// SRP_CRED_RSP that answers an SRP_CRED_REQ without a credit. A response re-posts its receive
// buffer before granting 1 + the credits owed for requests that ended without a response
// (aborted), so credits granted never exceed receive buffers posted less the spare. A channel
// that owes credits and has nothing outstanding returns them in an SRP_CRED_REQ.
//
// Flow control inside the target. A command that finds the buffer pool empty waits in its
// channel's FIFO and is retried whenever any channel frees a buffer; after Limits.BufferWait
// it is answered BUSY (retried by Linux without lowering the queue depth, unlike TASK SET
// FULL). Work that finds the send queue full waits in a FIFO for send completions.
//
// Task management runs on its own goroutine per channel. It claims the commands it affects
// (only those that arrived before it) with a compare-and-swap on their context, aborts them in
// the logical unit, and answers only once every claimed command has released its buffers, so
// that no RDMA reaches initiator memory after the response that lets the initiator invalidate
// it. Commands arriving on the same channel meanwhile wait until it is done.
//
// Closing. A DREQ, SRP_I_LOGOUT, a protocol violation or a failed work request disconnects
// the queue pair; the channel drains the flushed completions and the commands still in the
// logical units, then frees everything. Losing the last channel of a nexus resets the nexus in
// the logical units.

// ErrTargetClosed is returned by Serve after Shutdown.
var ErrTargetClosed = errors.New("srp: target shut down")

// Target is the SRP target engine: it accepts logins on ib.Listeners, runs one goroutine per
// RDMA channel that moves IUs and data, and hands SCSI commands to the LUN map the Authorizer
// chose for the initiator.
//
// Object model (as LIO's): Target → session (one per I_T nexus: initiator port identifier +
// target port identifier, with its scsi.Nexus, kept for the life of the target so that unit
// attentions survive relogins) → channel (one RC queue pair; several per session with
// multichannel logins) → command contexts (preallocated per channel).
type Target struct {
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

	mu        sync.Mutex
	shutting  bool
	listeners map[ib.Listener]struct{}
	sessions  map[nexusKey]*session
	channels  map[*channel]struct{}
	// sources are the source addresses with logins or channels: each host's share of the
	// sessions, channels and buffers (share.go).
	sources map[netip.Addr]*source
	// chReserved counts channels of logins in progress that passed the MaxChannelsTotal check
	// and are not in channels yet.
	chReserved int
	pools      map[ib.ProtectionDomain]*bufPool
	retiring   sync.WaitGroup // pools of removed devices waiting for their channels
	logins     sync.WaitGroup // login handlers in progress
	serving    sync.WaitGroup // Serve loops
	chans      sync.WaitGroup // channel goroutines (poll loops)

	// startHook, when set (scripted tests only), receives each accepted channel instead of
	// its goroutines being started: the test drives it step by step.
	startHook func(*channel)
	// readyWait, when set (tests only), makes channels wait on Ready even when the
	// connection offers ib.Waiter.
	readyWait bool
}

type authHolder struct{ a Authorizer }

// New makes a target. It starts nothing: call Serve for each listener.
func New(cfg Config) (*Target, error) {
	lim := cfg.Limits.withDefaults()
	if err := lim.validate(); err != nil {
		return nil, fmt.Errorf("srp: limits: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	port := cfg.TargetPort
	if port == nil {
		port = &scsi.TargetPort{Name: cfg.TargetPortID.String(), RelativeID: 1}
	}
	ports := map[iu.PortID]*scsi.TargetPort{cfg.TargetPortID: port}
	rel := map[uint16]bool{port.RelativeID: true}
	for _, p := range cfg.MorePorts {
		switch {
		case p.SCSI == nil:
			return nil, fmt.Errorf("srp: target port %v: no SCSI target port", p.ID)
		case ports[p.ID] != nil:
			return nil, fmt.Errorf("srp: target port %v is configured twice", p.ID)
		case rel[p.SCSI.RelativeID] || p.SCSI.RelativeID == 0:
			return nil, fmt.Errorf("srp: target port %v: relative target port identifier %d is 0 or taken", p.ID, p.SCSI.RelativeID)
		}
		ports[p.ID] = p.SCSI
		rel[p.SCSI.RelativeID] = true
	}
	t := &Target{
		cfg:        cfg,
		lim:        lim,
		log:        log.With(zap.Stringer("target_port", cfg.TargetPortID)),
		ports:      ports,
		listeners:  make(map[ib.Listener]struct{}),
		sessions:   make(map[nexusKey]*session),
		channels:   make(map[*channel]struct{}),
		sources:    make(map[netip.Addr]*source),
		pools:      make(map[ib.ProtectionDomain]*bufPool),
		loginSlots: make(chan struct{}, lim.MaxLoginsInProgress),
		logLimit:   loglimit.NewKeyed(rejectLogBurst, rejectLogEvery),
	}
	t.auth.Store(&authHolder{cfg.Authorizer})
	return t, nil
}

// Limits returns the effective limits (defaults applied).
func (t *Target) Limits() Limits { return t.lim }

// Serve accepts connection requests from l until ctx ends (it returns ctx.Err()), Shutdown is
// called (ErrTargetClosed), or l fails (that error). It may be called for several listeners at
// once. Shutdown closes l; when Serve returns for another reason l stays open.
func (t *Target) Serve(ctx context.Context, l ib.Listener) error {
	t.mu.Lock()
	if t.shutting {
		t.mu.Unlock()
		return ErrTargetClosed
	}
	t.listeners[l] = struct{}{}
	t.serving.Add(1)
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.listeners, l)
		t.mu.Unlock()
		t.serving.Done()
	}()
	fam := listenerFamily(l)
	log := t.log.With(zap.Stringer("listener", l.Addr()))
	log.Info("serving SRP logins", zap.String("login_form", loginFormName(fam)))
	for {
		req, err := l.Next(ctx)
		if err != nil {
			t.mu.Lock()
			shutting := t.shutting
			t.mu.Unlock()
			switch {
			case shutting:
				return ErrTargetClosed
			case ctx.Err() != nil:
				return ctx.Err()
			}
			log.Error("listener failed", zap.Error(err))
			return fmt.Errorf("srp: listener %v: %w", l.Addr(), err)
		}
		t.mu.Lock()
		if t.shutting {
			t.mu.Unlock()
			t.rejectShutdown(req, fam)
			return ErrTargetClosed
		}
		select {
		case t.loginSlots <- struct{}{}:
		default:
			// A flood of connection requests: refuse at once rather than pile up handlers
			// (each may wait for a nexus's old channels to close).
			t.mu.Unlock()
			t.rejectBusy(req, fam)
			continue
		}
		t.logins.Add(1)
		t.mu.Unlock()
		go func() {
			defer func() {
				<-t.loginSlots
				t.logins.Done()
			}()
			t.login(req, fam)
		}()
	}
}

// rejectShutdown answers a request that arrived while shutting down.
func (t *Target) rejectShutdown(req ib.ConnRequest, fam ib.Family) {
	var tag iu.Tag
	if f, err := parseLogin(req, fam); err == nil {
		tag = f.Tag
	}
	t.reject(req, tag, iu.LoginRejInsufficientResources, t.log, "target is shutting down", "wait for the target to restart")
}

// Prepare registers the data buffer pool of the device l is bound to (ib.DeviceListener), so
// that a host that cannot pin that much memory fails now, with the fix in the error, instead
// of refusing every login later with INSUFFICIENT RESOURCES. A listener on a wildcard address
// gets its pools with the first login on each device.
func (t *Target) Prepare(l ib.Listener) error {
	dl, ok := l.(ib.DeviceListener)
	if !ok {
		return nil
	}
	pd, ok := dl.PD()
	if !ok {
		return nil
	}
	if _, err := t.pool(pd); err != nil {
		return fmt.Errorf("%w; the data buffer pool (limits.buffer_pool_size, %d bytes per RDMA device) must be locked in memory: raise the locked-memory limit (LimitMEMLOCK= in the systemd unit, ulimit -l) or grant CAP_IPC_LOCK, or lower buffer_pool_size",
			err, t.lim.BufferPoolSize)
	}
	return nil
}

// rejectBusy answers a request that found every login slot taken.
func (t *Target) rejectBusy(req ib.ConnRequest, fam ib.Family) {
	var tag iu.Tag
	log := t.log.With(srcField(req, fam))
	if f, err := parseLogin(req, fam); err == nil {
		tag = f.Tag
		log = log.With(zap.Stringer("initiator", f.InitiatorPortID))
	}
	t.reject(req, tag, iu.LoginRejInsufficientResources, log,
		fmt.Sprintf("%d logins already in progress (max_logins_in_progress)", t.lim.MaxLoginsInProgress),
		"the initiator retries; if logins arrive this fast legitimately, raise limits.max_logins_in_progress")
}

// Shutdown stops accepting logins, sends SRP_T_LOGOUT on every channel, lets outstanding
// commands finish (new ones are answered BUSY), disconnects and releases everything. When ctx
// ends first, remaining commands are aborted in the logical units and channels are closed at
// once; Shutdown still waits for the logical units to give back their buffers and returns
// ctx.Err().
func (t *Target) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	t.shutting = true
	ls := make([]ib.Listener, 0, len(t.listeners))
	for l := range t.listeners {
		ls = append(ls, l)
	}
	t.mu.Unlock()
	for _, l := range ls {
		if err := l.Close(); err != nil {
			t.log.Warn("closing listener", zap.Stringer("listener", l.Addr()), zap.Error(err))
		}
	}
	t.serving.Wait()
	t.logins.Wait()

	t.mu.Lock()
	chs := make([]*channel, 0, len(t.channels))
	for ch := range t.channels {
		chs = append(chs, ch)
	}
	t.mu.Unlock()
	t.log.Info("shutting down", zap.Int("channels", len(chs)))
	for _, ch := range chs {
		ch.requestStop(stopGraceful, "target shutdown", iu.TLogoutNoReason)
	}
	allClosed := make(chan struct{})
	go func() {
		t.chans.Wait()
		close(allClosed)
	}()
	var err error
	select {
	case <-allClosed:
	case <-ctx.Done():
		err = ctx.Err()
		t.log.Warn("shutdown deadline reached: closing channels with commands outstanding", zap.Error(err))
		for _, ch := range chs {
			ch.requestStop(stopHard, "target shutdown deadline", iu.TLogoutNoReason)
		}
		<-allClosed
	}
	t.mu.Lock()
	pools := t.pools
	t.pools = make(map[ib.ProtectionDomain]*bufPool)
	t.mu.Unlock()
	for _, p := range pools {
		if perr := p.close(); perr != nil {
			t.log.Warn("releasing buffer pool", zap.Error(perr))
		}
	}
	t.retiring.Wait()
	t.log.Info("shut down")
	return err
}

// SetAuthorizer installs a new Authorizer (configuration reload) and applies it to every live
// session: a session whose initiator is now refused is disconnected; a session whose LUN map
// changed switches to the new map atomically (commands already running finish on the old one)
// and, if the LUNs it sees changed, gets the unit attention REPORTED LUNS DATA HAS CHANGED.
// A session whose initiator is logged out (or reconnecting) is left alone: its next login is
// authorized by a, and the unit attention is established then if its LUNs changed meanwhile.
func (t *Target) SetAuthorizer(a Authorizer) {
	t.auth.Store(&authHolder{a})
	t.mu.Lock()
	sessions := make([]*session, 0, len(t.sessions))
	for _, s := range t.sessions {
		sessions = append(sessions, s)
	}
	t.mu.Unlock()
	for _, s := range sessions {
		s.reauthorize(a)
	}
}

// pool returns the buffer pool of pd, creating and registering it on first use.
func (t *Target) pool(pd ib.ProtectionDomain) (*bufPool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.pools[pd]; p != nil {
		return p, nil
	}
	p, err := newBufPool(pd, t.lim.BufferPoolSize, t.lim.MaxTransferLen, t.lim.RemoteWriteForReadSinks)
	if err != nil {
		return nil, err
	}
	t.pools[pd] = p
	t.log.Info("registered data buffer pool", zap.Int64("bytes", p.size()), zap.Int64("largest_buffer", int64(poolMinBlock)<<p.maxOrder),
		zap.Bool("remote_write", t.lim.RemoteWriteForReadSinks))
	if rn, ok := pd.(ib.RemovalNotifier); ok {
		t.retiring.Add(1)
		go t.retirePool(pd, p, rn.Removed())
	}
	return p, nil
}

// retirePool releases the buffer pool of a device once the device is removed and the pool's
// channels have closed: otherwise every removal and re-add of a device (rdma link del/add)
// would leave a pool's memory mapped for the life of the process. A device added again gets
// a new protection domain, hence a new pool. Target shutdown closes a pool that is still in
// the map; a retired one is closed here.
func (t *Target) retirePool(pd ib.ProtectionDomain, p *bufPool, removed <-chan struct{}) {
	defer t.retiring.Done()
	select {
	case <-removed:
	case <-p.closing:
		return // Shutdown closes it
	}
	t.mu.Lock()
	if t.pools[pd] != p {
		t.mu.Unlock()
		return // Shutdown took it
	}
	delete(t.pools, pd)
	t.mu.Unlock()
	t.log.Info("RDMA device removed: releasing its data buffer pool once its channels have closed", zap.Int64("bytes", p.size()))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !p.unused() {
		<-tick.C
	}
	if err := p.close(); err != nil {
		t.log.Warn("releasing the buffer pool of a removed device", zap.Error(err))
		return
	}
	t.log.Info("released the data buffer pool of a removed device", zap.Int64("bytes", p.size()))
}

// acquireSession returns the session of key for a login from addr, creating it, and counts
// the login, against the source address's share too, until releaseSession. When the target
// has Limits.MaxSessions sessions already, the one without channels for the longest is
// forgotten to make room. It refuses (a non-nil loginError) when every session has channels
// (or a login or reset in progress), or when addr has Limits.MaxSessionsPerSource other
// nexuses with logins or channels.
func (t *Target) acquireSession(key nexusKey, addr netip.Addr) (*session, *source, *loginError) {
	var evicted *session
	defer func() {
		if evicted != nil {
			evicted.forget()
		}
	}()
	t.mu.Lock()
	defer t.mu.Unlock()
	src := t.sourceLocked(addr)
	if n := len(src.nexuses); src.nexuses[key] == 0 && n >= t.lim.MaxSessionsPerSource {
		if n == 0 {
			delete(t.sources, addr)
		}
		r := sessionsRefusal(addr, n, t.lim.MaxSessionsPerSource)
		return nil, nil, &loginError{reason: iu.LoginRejInsufficientResources, detail: r.detail, hint: r.hint}
	}
	s := t.sessions[key]
	if s == nil {
		if len(t.sessions) >= t.lim.MaxSessions {
			if evicted = t.oldestIdleLocked(); evicted == nil {
				if len(src.nexuses) == 0 {
					delete(t.sources, addr)
				}
				return nil, nil, &loginError{reason: iu.LoginRejInsufficientResources,
					detail: fmt.Sprintf("the target has %d I_T nexuses with channels (max_sessions %d)", t.lim.MaxSessions, t.lim.MaxSessions),
					hint:   "raise limits.max_sessions, or log out initiators that are no longer used"}
			}
			delete(t.sessions, evicted.key)
		}
		s = newSession(t, key)
		t.sessions[key] = s
	}
	s.logins++
	src.nexuses[key]++
	return s, src, nil
}

// releaseSession ends a login's use of s.
func (t *Target) releaseSession(s *session, src *source) {
	t.mu.Lock()
	s.logins--
	t.unrefLocked(src, s.key, false)
	t.mu.Unlock()
}

// oldestIdleLocked returns the evictable session idle for the longest, or nil. t.mu held.
func (t *Target) oldestIdleLocked() *session {
	var oldest *session
	var oldestSince time.Time
	for _, s := range t.sessions {
		since, ok := s.evictable()
		if !ok {
			continue
		}
		if oldest == nil || since.Before(oldestSince) {
			oldest, oldestSince = s, since
		}
	}
	return oldest
}

// reserveChannel counts a channel of nexus key from src about to be set up, against
// Limits.MaxChannelsTotal and src's Limits.MaxChannelsPerSource; it refuses when either is
// reached. addChannel keeps the count for the live channel (removeChannel drops it);
// unreserveChannel drops it when the channel is given up.
func (t *Target) reserveChannel(src *source, key nexusKey) *loginError {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.channels) + t.chReserved; n >= t.lim.MaxChannelsTotal {
		return &loginError{reason: iu.LoginRejInsufficientResources,
			detail: fmt.Sprintf("the target has %d channels (max_channels_total %d)", n, t.lim.MaxChannelsTotal),
			hint:   "raise limits.max_channels_total, or lower ch_count on the initiators"}
	}
	if src.channels >= t.lim.MaxChannelsPerSource {
		r := channelsRefusal(src.addr, src.channels, t.lim.MaxChannelsPerSource)
		return &loginError{reason: iu.LoginRejInsufficientResources, detail: r.detail, hint: r.hint}
	}
	t.chReserved++
	src.channels++
	src.nexuses[key]++
	return nil
}

func (t *Target) unreserveChannel(src *source, key nexusKey) {
	t.mu.Lock()
	t.chReserved--
	t.unrefLocked(src, key, true)
	t.mu.Unlock()
}

// sessionList returns a snapshot of the sessions.
func (t *Target) sessionList() []*session {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*session, 0, len(t.sessions))
	for _, s := range t.sessions {
		out = append(out, s)
	}
	return out
}

// addChannel records a started channel, which takes over its reservation (reserveChannel);
// it fails when shutting down, and the reservation stays.
func (t *Target) addChannel(ch *channel) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shutting {
		return false
	}
	t.channels[ch] = struct{}{}
	t.chReserved--
	t.chans.Add(1)
	return true
}

// removeChannel forgets a channel addChannel recorded, and what it counted against its source.
func (t *Target) removeChannel(ch *channel) {
	t.mu.Lock()
	delete(t.channels, ch)
	t.unrefLocked(ch.src, ch.sess.key, true)
	t.mu.Unlock()
	t.chans.Done()
}
