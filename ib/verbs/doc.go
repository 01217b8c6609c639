// Package verbs implements package ib's interfaces over rdma-core: librdmacm for connection
// management (RDMA/CM, TCP port space: what the Linux SRP initiator's dest=IP:PORT reaches)
// and libibverbs for the queue pairs. It is the only cgo package of the project; without cgo
// (or outside Linux) it builds as a stub whose entry points fail with ib.ErrNotSupported.
//
// Target side: Listen, then Listener.Next for ib.ConnRequests, answered with Accept or Reject.
// ListenIB listens as an AF_IB id in the IB port space (service ID 0x00000000013FPPPP) for the
// native IB CM logins of ib_srp's dgid=...,service_id=...; its requests carry the raw REQ
// private data and InfiniBand addresses (ib.IBAddresser). sockaddr_ib is built and read in Go
// (addr_ib.go).
// Initiator side (tests, tools): Resolve, register memory in Route.PD, Route.Connect.
// Devices lists the devices, ports and GIDs for `srptarget devices`.
//
// # Threads and waiting
//
// No OS thread ever blocks in C. The RDMA/CM event channel, every completion channel and every
// device's async event fd are non-blocking and waited on through Go's netpoller (os.NewFile
// and RawConn.Read): one goroutine for all CM events of the process, one per connection for
// its completion channel (started by the first Ready; under Serve, ib.Waiter, the consumer's
// goroutine waits there itself), one per open device for async events. Each Go->C crossing does one
// short, non-blocking thing.
//
// A connection has two CQs on one completion channel, the send queue's and the receive
// queue's. The completion-channel goroutine re-arms a CQ after each of its events and signals
// Ready, until the consumer calls ArmNotify (ib.NotifyArmer): from then on the consumer arms,
// and only before it sleeps, so a busy connection raises no events at all (no epoll wake-up,
// no read of the completion channel, no goroutine hand-off per burst of completions), and it
// arms the send CQ only when it waits for a send completion.
//
// # Shared queues
//
// The protection domain of a device implements ib.SharedQueues. NewCompChannel makes an
// ibv_comp_channel whose descriptor is in the netpoller; NewCQ makes a CQ on one, on the
// completion vector asked for (modulo the context's num_comp_vectors), armed only by CQ.Arm.
// The consumer's goroutine waits for all the CQs of a channel, and of other devices' channels
// joined through an epoll set, in CompChannel.Serve, which reads their events itself (as
// Conn.Serve does for a connection's own CQs). CQ.PollPair polls two CQs in one cgo call, the
// second only while a send is outstanding on it (sendOut). NewSRQ makes an ibv_create_srq of the depth asked for. A QP
// accepted with them (ib.AcceptParams.CQ, SendCQ, SRQ) has no CQ or completion channel of its
// own. CQ.Poll maps each completion back by its QP number: to the QP's queue accounting, or,
// for a receive of an SRQ (whose wr_id names the SRQ and the slot, srqTag), to the SRQ's
// slots, which are freed in any order; a completion of a QP no longer attached is dropped
// unless it gives back an SRQ buffer. A CQ and an SRQ hold a reference on the device, are
// members of it (its removal releases them once their QPs are gone) and refuse Close
// (ErrInvalidArgument, verbs' EBUSY) while a QP uses them.
//
// # Data path
//
// Each connection preallocates, in C memory, an ibv_send_wr per send slot and an ibv_recv_wr
// per receive slot with their SGEs, and a batch of ibv_wc. PostSend writes the caller's work
// requests field by field into that memory and posts them as one linked chain with one
// ibv_post_send; PostRecv likewise; PollCompletions takes up to 32 completions per call into
// C, polling the send CQ and then the receive CQ. None of them allocates in steady state. Slot
// accounting (when a queue is full) is done in Go, the same for every provider, as package ib
// specifies; the wr_id given to verbs is a per-queue sequence number, mapped back to the
// caller's ID at poll time.
//
// # Ownership of verbs objects
//
// The package opens its own verbs context per device (not librdmacm's), with one protection
// domain shared by every connection and memory region on the device. QPs are created on it and
// moved through INIT, RTR and RTS with the attributes the CM computes (rdma_init_qp_attr), as
// librdmacm does for QPs it owns; COMM_EST async events are passed on with rdma_notify. The
// context lives while a listener bound to the device, a request, a route, a connection or a
// memory region holds it.
//
// # Device removal
//
// RDMA_CM_EVENT_DEVICE_REMOVAL on any id of a device (or IBV_EVENT_DEVICE_FATAL) marks the
// device removed. A sentinel id bound to the device's address reports it when nothing else of
// ours is on the device but registered memory. The package then releases everything itself:
// every connection queues EventDeviceRemoved and loses its QP, CQ, completion channel and CM
// id; unanswered requests are dropped; a listener bound to the device returns
// ErrDeviceRemoved from Next; memory regions still registered are deregistered (a later
// Deregister returns nil); and the protection domain's Removed channel (ib.RemovalNotifier) is
// closed, so that the engine can unmap memory it keeps registered between connections. The
// last reference closes the PD and our context, and once libibverbs no longer lists the
// device, librdmacm's own context of it is closed too (rdma-core 44 would keep it open until
// its device list is re-synced, never if the last device went; see srpt_release_cma). Drivers
// that cannot disassociate user contexts (rxe among them) finish unregistering the device
// only when every file of it is closed: `rdma link del` then returns at once. A device added
// again is a new device, with a new protection domain.
//
// # Differences from ib/memfabric a caller may notice
//
//   - Private data is padded by the IB CM (InfiniBand, RoCE): a connection request carries
//     56 bytes, a REP 196, a REJ 148, zero-filled past what the peer sent. iWARP carries exact
//     lengths.
//   - An SGE must name a region registered by this package on the connection's device;
//     anything else fails at post time with ib.ErrInvalidArgument, because its lkey would mean
//     nothing here, or something else.
//   - Accept after the initiator gave up fails (rdma_accept's error) instead of returning a
//     connection that reports EventDisconnected.
//   - A ProtectionDomain is only usable while something holds the device open (see above): a
//     PD kept without any region, connection, request or bound listener may be closed.
//   - After our own Disconnect of an established connection, EventDisconnected comes when the
//     peer answers the DREQ (it answers when its engine calls Disconnect), or when the DREQ
//     times out. Do not wait for it before draining and closing.
//   - Soft-RoCE (rxe, kernel 6.1) does not flush a receive posted after the QP entered the
//     error state (its receive queue is filled from user space without a system call): do not
//     wait for completions of receives posted after an error or Disconnect. Sends are flushed.
//   - Soft-RoCE reports a local SGE whose lkey names no region (a deregistered one) as
//     ib.StatusLocalQPOperationError, not ib.StatusLocalProtectionError (a range outside a
//     region it found is a protection error).
//
// Both deviations are asserted by the conformance suite (ib/ibtest, TestConformance), which
// runs here per address in the VM (TestVerbs of integration/vm/guest/checks) and over
// ib/memfabric in go test, so that a change on either side shows up.
package verbs
