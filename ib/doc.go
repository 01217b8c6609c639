// Package ib is the RDMA abstraction the SRP target engine is written against: a listener for
// RDMA/CM connection requests, reliable-connected queue pairs with their completion queue and
// connection events, and registered memory. It holds what the engine needs from verbs and
// nothing more.
//
// Two implementations exist: the verbs one over rdma-core (cgo, files with a build tag) and
// ib/memfabric, an in-memory fabric for tests. Both meet the contract below; memfabric is
// written to be exactly as strict as hardware where hardware would catch a bug, so that a bug
// seen on real verbs shows up in unit tests too. Two things keep them from drifting apart:
//
//   - The post-time rules are written once, in this package (check.go: CheckQPCaps,
//     CheckAccess, CheckSendWR, CheckRecvWR, CheckConnParams, CheckAccept), and both
//     implementations call them before their own checks of a region's origin.
//   - ib/ibtest is the conformance suite of the execution rules the engine relies on (RC
//     ordering, RDMA READ, requester errors and flushes, queue slots, disconnect, close). It
//     runs over memfabric in go test and over verbs on soft-RoCE in the VM harness (make e2e).
//     A rule the engine depends on gets a test there; the known deviations of soft-RoCE are
//     fields of ibtest.Pair, asserted rather than skipped.
//
// # Establishment
//
// A listener is of an IP family (RDMA/CM on an IP address, ib_srp's dest=) or AF_IB (native
// InfiniBand addressing, ib_srp's dgid=): the family, not the port space, decides what a
// request's private data holds (Family, FamilyListener), and the requests of an AF_IB listener
// name GIDs and P_Keys (IBAddr, IBAddresser). The sizes below are the IP family's.
//
// Listener.Next delivers a ConnRequest carrying the initiator's private data (at most
// MaxConnRequestPrivateData = 56 bytes over RDMA/CM: the 92-byte IB CM REQ minus the 36-byte
// CMA header), its address and its responder resources / initiator depth. Over IB and RoCE every
// private-data field arrives zero-padded to its full size (56, 196, 148 bytes), over iWARP with
// the sender's length: parse by the fields' offsets, never by the length. The engine registers
// the channel's memory in ConnRequest.PD, then answers exactly once:
//
//   - Accept creates the QP with the given caps, posts AcceptParams.Recv, and only then sends the
//     REP (at most MaxAcceptPrivateData = 196 bytes). rdma_accept moves the QP to RTS, so the
//     first SEND of the initiator may arrive before Accept has returned, and before
//     EventEstablished: an engine must process receive completions that precede
//     EventEstablished (LIO queues them until the channel is live). InitiatorDepth must not
//     exceed the request's ResponderResources. A parameter error does not answer the request.
//   - Reject sends a REJ with reason "consumer defined" (28) and at most
//     MaxRejectPrivateData = 148 bytes of private data.
//
// Oversized private data fails with ErrPrivateDataTooLong; a second answer with ErrAnswered.
//
// # Posting
//
// PostSend and PostRecv take slices of value structs and post them in order with one call
// (one cgo crossing, one doorbell). They return how many were posted: on error, wrs[:n] are
// posted and will execute and complete, wrs[n] is the one the error is about, nothing after it
// was posted. Work requests and their SGE lists are copied at post time, so the caller reuses
// its slices at once; the memory they describe belongs to the QP until the work request's
// completion is polled (for an unsignaled one: until a later completion of the same queue is
// polled). Inline sends copy the data at post time instead and check no lkey.
//
// Errors at post time (the work request is not posted; CheckSendWR and CheckRecvWR are the
// rules): ErrClosed, ErrDeviceRemoved,
// ErrQueueFull (no free slot, see below), ErrInvalidArgument (unknown opcode, more SGEs than
// the QP caps allow, an RDMA READ with more SGEs than DeviceLimits.MaxReadSGE or with a zero
// negotiated initiator depth, inline data beyond MaxInlineData or on an RDMA READ, an SGE with
// no region or with length 0, more than 2 GiB in one work request).
//
// Queue slots: a receive occupies its slot until its completion is polled. A send-queue work
// request occupies its slot until its own completion, or the completion of a later work request
// of the same send queue, is polled: a send queue of nothing but unsignaled work requests
// fills up and PostSend returns ErrQueueFull. Post a signaled work request at least every
// SendQueueDepth work requests (SRP: the response SEND is signaled, the RDMA WRITEs before it
// are not).
//
// # Execution and ordering (RC)
//
//   - The work requests of one send queue execute in posting order; one that cannot proceed
//     (a SEND waiting for the peer to post a receive) holds back everything behind it.
//   - The data of an RDMA WRITE is in the peer's memory before the peer sees the receive
//     completion of any SEND posted after it on the same QP. The target relies on this to post
//     its RDMA WRITEs and the SRP_RSP SEND as one chain without waiting in between.
//   - The data of an RDMA READ is in local memory only once the READ's completion is polled.
//   - Completions of one queue appear in posting order; completions of the send and receive
//     queues interleave arbitrarily.
//   - A successful unsignaled work request produces no completion. A failed or flushed work
//     request always produces one, signaled or not.
//   - Completion.Opcode and Completion.ByteLen are valid only when Status is StatusSuccess
//     (as in verbs): the engine recognises a failed work request by its ID.
//   - A zero-length RDMA WRITE (empty SGL) checks no rkey and is the usual drain marker.
//   - SEND with no receive posted at the peer: the peer answers "receiver not ready" and the
//     sender retries RNRRetryCount times (the count the peer gave at connection time; 7 means
//     for ever), then the SEND completes with StatusRNRRetryExceeded.
//
// # Errors on a QP
//
// The first failing work request completes with its own status and moves the QP to the error
// state. Every work request still outstanding on that QP, on both queues, then completes with
// StatusWRFlushError in posting order, and so does everything posted while the QP is in the
// error state (post succeeds). The statuses the engine will see:
//
//   - StatusLocalProtectionError: a local SGE names an unregistered or foreign region, lies
//     outside it, or the HCA must write into a region without AccessLocalWrite (receive
//     buffers, RDMA READ sinks). Soft-RoCE reports an lkey that names no region as
//     StatusLocalQPOperationError instead: tell failures apart by ID, not by status.
//   - StatusRemoteAccessError (requester): bad rkey, range outside the peer's region, or the
//     region lacks AccessRemoteWrite/AccessRemoteRead. The responder's QP goes to the error
//     state too, flushing its own work requests.
//   - SEND larger than the receive buffer: the receiver's receive completes with
//     StatusLocalLengthError, the sender's SEND with StatusRemoteInvalidRequest; both QPs go to
//     the error state. A receive buffer failing the local checks gives
//     StatusLocalProtectionError at the receiver and StatusRemoteOperationError at the sender.
//   - StatusTransportRetryExceeded: the peer stopped answering (crashed, QP destroyed, or its
//     QP in the error state because it disconnected).
//   - StatusRNRRetryExceeded: see above.
//
// # Waiting: Ready
//
// Conn.Ready returns a channel with a buffer of one that receives a value whenever a
// completion or an event is queued (and once more on Close). The engine's goroutine selects on
// it together with its other work (backstore completions, shutdown), then drains: it calls
// PollCompletions until it returns fewer than len(wcs) and PollEvent until it returns false.
// Anything queued after the drain began signals the channel again, so no wake-up is lost.
// The verbs implementation arms the CQ (ibv_req_notify_cq) before it signals, on a goroutine
// parked in the netpoller on the non-blocking completion channel fd (os.NewFile +
// SyscallConn), never on an OS thread blocked in C. The channel is never closed.
//
// # Waiting: Serve
//
// A connection that implements Waiter lets the consumer's own goroutine be the one parked:
// Serve calls the consumer's step, parks when it returns false, and calls it again for
// completions, events or an Interrupt. Behind Ready every wake-up runs two goroutines (the
// parked one reads the event and signals, then the consumer's); under Serve one. The engine
// uses Serve while the queue pair is open and the connection offers it, with its other work
// (backstore completions, timers, wake-ups) delivered through Interrupt.
//
// # Shared queues
//
// A protection domain that implements SharedQueues makes completion queues (CQ) and shared
// receive queues (SRQ) that many connections of its device use (AcceptParams.CQ and SRQ): one
// goroutine polls one CQ for all of them and tells them apart by Completion.QPNum, and their
// receive buffers are one pool. shared.go states the rules: the ordering is per queue of each
// QP, an SRQ's receives are never flushed by one QP's error (a closing QP waits for no receive
// flushes), and a CQ or SRQ outlives the QPs that use it. AcceptParams.OnEvent tells such a
// consumer which connection has an event to poll. Shared CQs raise their events on a
// CompChannel of their device, whose Serve parks the consumer's goroutine for all of them (and
// for other devices' channels) as Waiter.Serve does for one connection.
//
// # Events and teardown
//
//   - EventEstablished: at most once.
//   - EventDisconnected: exactly once (unless the device goes first): after the peer's DREQ,
//     after our own Disconnect, or when the connection fails before being established. When
//     the peer disconnects, our QP is NOT moved to the error state by the fabric: the engine
//     calls Disconnect (which answers the DREQ and flushes everything), drains the flushes,
//     then Closes. Until then its work requests meet a peer that no longer answers and fail
//     with StatusTransportRetryExceeded.
//   - EventDeviceRemoved: the device is gone. Post fails with ErrDeviceRemoved, no flush
//     completions are generated (the engine must not wait for them), and Close releases
//     everything. Listener.Next fails with ErrDeviceRemoved.
//
// Disconnect moves the QP to the error state (flushing) and sends a DREQ. Close disconnects a
// still connected QP (the peer gets EventDisconnected) and releases QP, CQ and CM id; buffers
// posted to the QP are the engine's again after Close returns. Memory regions belong to the
// ProtectionDomain and are deregistered separately, after the QPs that use them are closed.
//
// # Memory
//
// RegisterMemory returns an MR whose Addr and RKey the peer uses for RDMA and that local SGEs
// name directly. AccessRemoteWrite requires AccessLocalWrite (verbs rule). The verbs
// implementation must not register Go heap memory: allocate a Slab (mmap'd, page-aligned, also
// what O_DIRECT needs) and carve buffers from it.
//
// # Concurrency and allocation
//
// Every method is safe for concurrent use; the intended use is one goroutine per Conn doing all
// of its posting, polling and waiting. PostSend, PostRecv, PollCompletions and PollEvent do not
// allocate in steady state (WR, SGE and completion arrays are caller-owned or preallocated per
// QP); errors may allocate.
package ib
