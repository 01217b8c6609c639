package srp

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// SessionInfo describes one I_T nexus, for operators.
type SessionInfo struct {
	InitiatorPortID iu.PortID
	TargetPortID    iu.PortID
	Channels        int
	Remote          netip.AddrPort
	// LUNMap is the map the session's commands go to (the Authorizer's answer), ChannelInfo
	// its live channels in login order.
	LUNMap      *scsi.LUNMap
	ChannelInfo []ChannelInfo
	// IO is the session's I/O counters per LUN, every LUN its maps have had (iostats.go).
	IO []LUNIOStats
}

// Total sums the session's I/O counters over its LUNs.
func (s *SessionInfo) Total() IOStats {
	var t IOStats
	for _, l := range s.IO {
		t.Add(l.IOStats)
	}
	return t
}

// ChannelInfo describes one RDMA channel of a session. InFlight and CreditsHeld are published
// by the channel's goroutine once per pass of its loop, so they may lag by one pass.
type ChannelInfo struct {
	ID     uint64
	Remote netip.AddrPort
	// RemoteIB is the initiator's InfiniBand address for a login through an AF_IB listener;
	// Remote then holds only its GID (an InfiniBand peer has no port).
	RemoteIB *ib.IBAddr
	// QPNum is the queue pair number, 0 when the connection does not expose it
	// (ib.QPNumberer).
	QPNum uint32
	// Credits is what the login granted (the initial REQUEST LIMIT DELTA); CreditsHeld the
	// credits the initiator holds now, as far as the target knows.
	Credits     int
	CreditsHeld int64
	// InFlight counts the commands the target works on.
	InFlight  int
	LoginTime time.Time
}

// Sessions lists the sessions that have at least one channel.
func (t *Target) Sessions() []SessionInfo {
	var out []SessionInfo
	for _, s := range t.reg.sessionList() {
		s.mu.Lock()
		n, remote := len(s.channels), s.src
		chs := make([]ChannelInfo, 0, n)
		for _, ch := range s.channels {
			chs = append(chs, ChannelInfo{
				ID:          ch.id,
				Remote:      ch.remote,
				RemoteIB:    ch.ibSrc,
				QPNum:       ch.pub.qpn,
				Credits:     ch.credits,
				CreditsHeld: ch.pub.granted.Load(),
				InFlight:    int(ch.pub.active.Load()),
				LoginTime:   ch.pub.loginAt,
			})
		}
		s.mu.Unlock()
		if n > 0 {
			out = append(out, SessionInfo{InitiatorPortID: s.key.initiator, TargetPortID: s.key.target, Channels: n, Remote: remote,
				LUNMap: s.lunMap.Load(), ChannelInfo: chs, IO: s.io.Load().snapshot()})
		}
	}
	slices.SortFunc(out, func(a, b SessionInfo) int {
		return slices.Compare(a.InitiatorPortID[:], b.InitiatorPortID[:])
	})
	return out
}

// PoolUse returns the bytes of data buffers in use and the size of the buffer pools, summed
// over the RDMA devices that have one.
func (t *Target) PoolUse() (inUse, size int64) {
	t.pools.each(func(p *bufPool) {
		inUse += p.inUse.Load()
		size += p.size()
	})
	return inUse, size
}

// Stats is a snapshot of the target's counters.
type Stats struct {
	LoginsAccepted uint64
	LoginsRejected uint64
	// Rejects counts rejected logins by reason (index: reason - 0x00010000, 0..6), those
	// the access control lists refused excepted: RejectedByACL counts them, whatever the
	// reason the SRP_LOGIN_REJ gave (CHANNEL LIMIT REACHED, as LIO answers them).
	Rejects        [7]uint64
	RejectedByACL  uint64
	ChannelsOpen   int64
	ChannelsClosed uint64
	Commands       uint64
	TaskMgmt       uint64
	// TaskMgmtByFunc counts SRP_TSK_MGMTs by function, in the order of TaskMgmtFuncs; the last
	// element counts the others (functions SRP does not define, malformed IUs).
	TaskMgmtByFunc [len(TaskMgmtFuncs) + 1]uint64
	// Aborted counts commands that ended without a response (task management, nexus loss).
	Aborted uint64
	// BytesIn is data-in (RDMA WRITE to the initiator), BytesOut data-out (RDMA READ and
	// immediate data).
	BytesIn  uint64
	BytesOut uint64
	// TransportErrors counts commands answered by the transport itself (malformed IU, limits).
	TransportErrors uint64
	// ProtocolErrors counts channels closed because of a protocol violation.
	ProtocolErrors uint64
	// RDMAErrors counts failed work requests (other than flushes).
	RDMAErrors uint64
	// BufferWaits counts commands that had to wait for a data buffer; BufferBusy those
	// answered BUSY after Limits.BufferWait.
	BufferWaits uint64
	BufferBusy  uint64
	// RDMAStalls counts channels closed by the stall watchdog (Limits.RDMATimeout).
	RDMAStalls uint64
	// IdleClosed counts channels closed for having done nothing for Limits.IdleTimeout.
	IdleClosed uint64
	// CreditViolations counts responses that would have granted more credits than receive
	// buffers were posted. It must stay 0; it exists to catch bugs.
	CreditViolations uint64
	// CreditRequests counts SRP_CRED_REQs sent: credits owed to a channel with nothing
	// outstanding (its commands aborted by task management on another channel).
	CreditRequests uint64
	// PoolInUse and PoolHighMark are bytes of data buffers, summed over devices; PoolSize is
	// the pools' size, also summed (limits.buffer_pool_size per device with a pool).
	PoolInUse    int64
	PoolHighMark int64
	PoolSize     int64
	// SendPosts counts the chains of send-queue work requests the channels posted (one
	// PostSend each), SendWRs the work requests in them (RDMA READs and WRITEs, responses):
	// SendWRs/SendPosts is how many a post carries on average.
	SendPosts uint64
	SendWRs   uint64
}

// SessionIO lists the I/O counters of every session the target knows, those whose initiator
// logged out included (a session is kept until it is forgotten: Config.SessionForgotten).
func (t *Target) SessionIO() []SessionIOInfo {
	ss := t.reg.sessionList()
	out := make([]SessionIOInfo, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.ioInfo())
	}
	slices.SortFunc(out, func(a, b SessionIOInfo) int {
		if c := slices.Compare(a.InitiatorPortID[:], b.InitiatorPortID[:]); c != 0 {
			return c
		}
		return slices.Compare(a.TargetPortID[:], b.TargetPortID[:])
	})
	return out
}

// Stats returns a snapshot of the counters.
func (t *Target) Stats() Stats {
	c := &t.stats
	s := Stats{
		LoginsAccepted:   c.loginsAccepted.Load(),
		LoginsRejected:   c.loginsRejected.Load(),
		RejectedByACL:    c.rejectedByACL.Load(),
		ChannelsOpen:     c.channelsOpen.Load(),
		ChannelsClosed:   c.channelsClosed.Load(),
		Commands:         c.commands.Load(),
		TaskMgmt:         c.taskMgmt.Load(),
		Aborted:          c.aborted.Load(),
		BytesIn:          c.bytesIn.Load(),
		BytesOut:         c.bytesOut.Load(),
		TransportErrors:  c.transportErrors.Load(),
		ProtocolErrors:   c.protocolErrors.Load(),
		RDMAErrors:       c.rdmaErrors.Load(),
		BufferWaits:      c.bufferWaits.Load(),
		BufferBusy:       c.bufferBusy.Load(),
		CreditViolations: c.creditViolations.Load(),
		RDMAStalls:       c.rdmaStalls.Load(),
		IdleClosed:       c.idleClosed.Load(),
		CreditRequests:   c.credReqs.Load(),
		SendPosts:        c.sendPosts.Load(),
		SendWRs:          c.sendWRs.Load(),
	}
	for i := range s.Rejects {
		s.Rejects[i] = c.rejects[i].Load()
	}
	for i := range s.TaskMgmtByFunc {
		s.TaskMgmtByFunc[i] = c.taskMgmtByFunc[i].Load()
	}
	t.pools.each(func(p *bufPool) {
		s.PoolInUse += p.inUse.Load()
		s.PoolHighMark += p.highMark.Load()
		s.PoolSize += p.size()
	})
	return s
}

// poolsIdle reports whether every buffer of every device pool is back (for tests and for
// checking a quiescent target).
func (t *Target) poolsIdle() bool {
	idle := true
	t.pools.each(func(p *bufPool) {
		if p.inUse.Load() != 0 || p.freeBytes()+p.cached.Load() != p.size() {
			idle = false
		}
	})
	return idle
}

// waitIdle is used by tests through export_test.go.
func (t *Target) waitIdle(ctx context.Context) error {
	for {
		if t.poolsIdle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}
