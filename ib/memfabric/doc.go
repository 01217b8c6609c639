// Package memfabric is an in-memory RDMA fabric implementing the ib interfaces, for tests of
// the SRP target and of the test initiator. It lives apart from ib so that production binaries
// do not link it.
//
// A Fabric holds Nodes, each one device with one IP address and one protection domain. The
// target side calls Node.Listen and answers ib.ConnRequests; the initiator side calls
// Node.Connect and gets a *Conn. Both sides register memory in Node.PD.
//
// What is modelled, and how (the contract itself is in package ib's documentation):
//
//   - Address families and port spaces: Node.Listen and Node.ListenPortSpace listen as an id
//     of an IP family, Node.ListenIB as an AF_IB id in the IB port space (service ID
//     0x00000000013FPPPP); ConnectParams.Family sends as an IP-family id (behind RDMA/CM's
//     36-byte header, so at most ib.MaxConnRequestPrivateData = 56 bytes) or raw, as
//     ib_srp's dgid= logins are (ib.MaxIBConnRequestPrivateData = 92). What a listener
//     receives follows both families (the table at Connect): the IB CM REQ's full 92 bytes
//     for an AF_IB listener, 56 for an IP one, and a raw request to an IP listener is
//     rejected. Private data is delivered zero-padded, as on IB and RoCE. An AF_IB
//     listener's requests carry GIDs (Node.GID) and P_Keys (ib.IBAddresser).
//   - Keys and bounds: every RDMA access checks the rkey, the range and the access flag of the
//     responder's region; every local SGE is checked against its region (registered in this
//     node's PD, in range, local write where the HCA writes). Region addresses are synthetic,
//     one 4 GiB window per region, so an address mixed up between regions never validates.
//   - Errors as verbs produce them, including the responder side: a remote access error or an
//     oversized SEND moves both QPs to the error state, and both flush.
//   - Slot accounting: unsignaled work requests keep their send-queue slot until a later
//     completion is polled; a CQ is sized SQ+RQ and never overruns.
//   - RNR: a SEND that finds no receive waits for one. With an RNR retry count of 7 it waits
//     for ever; with a count n < 7 it fails with StatusRNRRetryExceeded after n*RNRTimer
//     (immediately for 0). Real hardware retries at RNR-timer intervals, so the bound is the
//     same order of magnitude; memfabric does not model the timer value the peer advertises.
//   - A peer that no longer answers (vanished, closed, removed, or in the error state):
//     work requests aimed at it fail with StatusTransportRetryExceeded after RetryTimeout.
//   - Ordering: each send queue executes strictly in order and completions are queued in
//     order. By default work requests execute synchronously inside the Post call (or, for a
//     SEND waiting for a receive, inside the peer's PostRecv or a timer), which is
//     deterministic. Options.Async executes them later on a goroutine per connection, which
//     exposes consumers that touch buffers before their completions.
//   - Shared queues (ib.SharedQueues on Node.PD): a shared CQ queues the completions of every
//     QP accepted with it in the order they happen and overruns when full (Poll then fails);
//     an SRQ's receives are taken oldest first by whichever QP receives a SEND, hold their
//     slot until polled, are never flushed by a QP's error, and wake SENDs waiting in RNR.
//     Completions of a closed QP stay in its shared CQ and are polled later. An armed CQ's
//     next completion queues one event on its completion channel, which its Serve (or the
//     Serve of the channel whose also lists it) takes. Options.Shared
//     sets the limits (MaxSRQWR -1: a device without SRQs).
//   - Not modelled: RDMA READ depth limits (reads complete as they execute, the depth only
//     gates whether reads are allowed), packet loss, MTU segmentation, SRQ limit events,
//     atomics, immediate data, memory windows.
//
// Every goroutine and timer stops on Conn.Close (both ends) or Fabric.Close.
package memfabric
