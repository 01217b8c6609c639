package srp

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/lib/loglimit"
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
		loginSlots: make(chan struct{}, lim.MaxLoginsInProgress),
		logLimit:   loglimit.NewKeyed(rejectLogBurst, rejectLogEvery),
	}
	t.pools.init(&t.lim, t.log)
	t.reg.init(&t.lim, func(key nexusKey) *session {
		return newSession(key, t.ports[key.target], t.log, cfg.SessionForgotten)
	})
	t.auth.Store(&authHolder{cfg.Authorizer})
	var err error
	if t.io, err = resolveBackstoreIO(lim.BackstoreIO); err != nil {
		return nil, err
	}
	for i := range lim.PollGroups {
		t.groups = append(t.groups, newPollGroup(t, i))
	}
	t.groupsFillPs = lim.PollGroups >= runtime.GOMAXPROCS(0)
	return t, nil
}

// BackstoreIO returns the engine file and block logical units are read and written with
// (BackstoreIOSync or BackstoreIOURing) and, when io_uring was wanted (auto) and is not used,
// why.
func (t *Target) BackstoreIO() (BackstoreIO, error) { return t.io.engine, t.io.unavailable }

// Limits returns the effective limits (defaults applied).
func (t *Target) Limits() Limits { return t.lim }

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
	if _, err := t.pools.get(pd); err != nil {
		return fmt.Errorf("%w; the data buffer pool (limits.buffer_pool_size, %d bytes per RDMA device) must be locked in memory: raise the locked-memory limit (LimitMEMLOCK= in the systemd unit, ulimit -l) or grant CAP_IPC_LOCK, or lower buffer_pool_size",
			err, t.lim.BufferPoolSize)
	}
	return nil
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
	t.reg.close()
	for _, l := range ls {
		if err := l.Close(); err != nil {
			t.log.Warn("closing listener", zap.Stringer("listener", l.Addr()), zap.Error(err))
		}
	}
	t.serving.Wait()
	t.logins.Wait()

	chs := t.reg.channelList()
	t.log.Info("shutting down", zap.Int("channels", len(chs)))
	for _, ch := range chs {
		ch.requestStop(stopGraceful, "target shutdown", iu.TLogoutNoReason)
	}
	allClosed := make(chan struct{})
	go func() {
		t.reg.live.Wait()
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
	for _, g := range t.groups {
		g.stop()
	}
	t.pools.close()
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
	for _, s := range t.reg.sessionList() {
		s.reauthorize(a)
	}
}
