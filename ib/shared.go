package ib

// Shared queues: one completion queue and one shared receive queue serving many queue pairs,
// so that one goroutine (a poll group) polls one queue for all of its connections, and the
// receive buffers of those connections are one pool instead of one per connection. SPDK's
// NVMe-oF RDMA target keeps a CQ and an SRQ per poll group and device (lib/nvmf/rdma.c); the
// kernel's ib_srpt takes its CQs from the shared CQ pool and has a per-device SRQ (use_srq).

// SharedQueues is implemented by protection domains whose device can make completion queues
// and shared receive queues for the connections accepted on it (AcceptParams.CQ and SRQ).
type SharedQueues interface {
	// NewCompChannel creates a completion channel (ibv_create_comp_channel): the CQs made on
	// it raise their events there, and one goroutine waits for all of them (CompChannel.Serve).
	NewCompChannel() (CompChannel, error)
	// NewCQ creates a completion queue of depth entries whose events go to ch, a channel of
	// the same device. Its interrupts go to completion vector vector modulo
	// SharedLimits.CompVectors (ibv_create_cq's comp_vector), so that poll groups on different
	// cores are woken on different vectors.
	NewCQ(ch CompChannel, depth, vector int) (CQ, error)
	// NewSRQ creates a shared receive queue of depth receives of at most maxSGE SGEs each
	// (ibv_create_srq). It fails with ErrNotSupported when SharedLimits.MaxSRQWR is 0.
	NewSRQ(depth, maxSGE int) (SRQ, error)
	// SharedLimits are the device's limits for both.
	SharedLimits() SharedLimits
}

// SharedLimits are the capabilities of a device for shared queues (from ibv_device_attr).
type SharedLimits struct {
	MaxCQE      int // max_cqe
	CompVectors int // the context's num_comp_vectors (at least 1)
	MaxSRQWR    int // max_srq_wr; 0 when the device has no shared receive queues
	MaxSRQSGE   int // max_srq_sge
}

// CQ is a completion queue that several queue pairs use for both of their queues.
//
// Completions of one queue of one QP appear in posting order; Completion.QPNum names the QP.
// The depth must hold every completion that can be outstanding at once: the send queue depths
// plus the receive queue depths (or the SRQ's depth) of every QP using it. Beyond that the CQ
// overruns: verbs reports an asynchronous CQ error and the QPs using it go to the error state;
// memfabric fails Poll with ErrQueueFull. Either way the CQ is unusable.
//
// Waiting is as with NotifyArmer, for one queue: Arm makes the next completion added raise
// one event on the CQ's CompChannel; a completion that arrived before the Arm raises nothing,
// so the consumer polls once more after arming before it waits. Nothing raises an event before
// the first Arm, and an event spends its Arm.
//
// One goroutine polls a CQ; Arm and Close may be called from any.
type CQ interface {
	// Poll copies up to len(wcs) completions, oldest first, and returns how many. Polling a
	// completion frees its work request's queue slot (and for a send queue the slots of the
	// unsignaled work requests before it), as Conn.PollCompletions does.
	Poll(wcs []Completion) (int, error)
	// PollPair polls this CQ and then, when wcs has room left, other (a CQ of the same
	// device), in one call into the provider (verbs: one cgo crossing instead of two). A
	// provider may skip a CQ on which no work request is outstanding. An error is this CQ's
	// or other's; completions taken before it are in wcs[:n] all the same.
	PollPair(other CQ, wcs []Completion) (n int, err error)
	// Arm requests one event for the next completion (ibv_req_notify_cq).
	Arm() error
	// Close releases the CQ. Every QP using it must be closed first (verbs: EBUSY); it fails
	// with ErrInvalidArgument otherwise.
	Close() error
}

// CompChannel is a completion channel (struct ibv_comp_channel): the CQs made on it raise
// their events there, so that one goroutine waits for all of them at once, parked in the Go
// netpoller on the channel's file descriptor (verbs), with no goroutine per CQ. A channel
// belongs to one device; a consumer with CQs on several devices waits for all their channels
// in one Serve (also).
type CompChannel interface {
	// Serve runs the consumer's loop on the calling goroutine, as Waiter.Serve does: it
	// calls step at once, and when step returns false it parks until an event was raised on
	// this channel or on one of also (channels of other devices of the same provider) or
	// until Interrupt, then calls step again. fired holds the CQs whose events were taken
	// since step last ran, one entry per event (ibv_get_cq_event; acknowledged by the
	// provider); it is empty on the first call, after an Interrupt or a spurious wake-up (the
	// consumer polls either way) and is valid only during the call. Serve returns nil when
	// step returns true, and an error wrapping ErrClosed once the channel is closed. A
	// channel is served by one goroutine at a time, also's too; step must not close any of
	// them.
	Serve(also []CompChannel, step func(fired []CQ) (done bool)) error
	// Interrupt makes Serve call step again soon: at once if it is parked, after the step in
	// progress otherwise, or at the start of the next Serve. Any goroutine, any time.
	Interrupt()
	// Close releases the channel. Every CQ made on it must be closed first
	// (ErrInvalidArgument otherwise; verbs: EBUSY).
	Close() error
}

// SRQ is a shared receive queue: the receive queue of every QP accepted with it.
//
//   - An incoming SEND on any of those QPs consumes the oldest receive posted to the SRQ; its
//     completion goes to that QP's completion queue with that QP's QPNum. With the SRQ empty
//     the SEND meets "receiver not ready" as with an empty receive queue (RNR retries).
//   - A receive occupies its slot until its completion is polled: at most depth receives are
//     posted and not yet polled, and PostRecv fails with ErrQueueFull beyond.
//   - A QP's error state does not flush the SRQ's receives: they stay posted for the other QPs.
//     A QP attached to an SRQ therefore has no receive flushes to wait for when it closes.
//   - Completions of a QP not yet polled when it is closed may be dropped from its CQ (mlx5
//     cleans the CQ of a destroyed QP's entries) or still be polled later, naming a QP number
//     the consumer no longer knows: it must take such a receive's buffer back as its own.
//   - Close releases the SRQ, once every QP attached to it is closed (else
//     ErrInvalidArgument); receives still posted then never complete.
type SRQ interface {
	// PostRecv posts receive buffers in order, with Conn.PostRecv's partial result rule.
	PostRecv(wrs []RecvWR) (int, error)
	Close() error
}
