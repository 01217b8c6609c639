package memfabric

import (
	"time"

	"github.com/srptarget/srptarget/ib"
)

// DefaultLimits are used when Options.Limits is zero: in the range of a ConnectX HCA, with room
// for the SRP target's 4096-deep send queue.
var DefaultLimits = ib.DeviceLimits{
	MaxQueueDepth: 16384,
	MaxSendSGE:    32,
	MaxRecvSGE:    32,
	MaxReadSGE:    32,
	MaxInlineData: 256,
	MaxRDAtomic:   16,
}

// Options tune the fabric. The zero value is a synchronous fabric with DefaultLimits.
type Options struct {
	// Limits are the device limits of every node (set MaxReadSGE to 1 to model iWARP/siw).
	Limits ib.DeviceLimits
	// Async executes send-queue work requests on a goroutine per connection instead of inside
	// PostSend/PostRecv. Results are the same for a correct consumer; a consumer that reuses a
	// buffer before its completion, or reads one before it, sees wrong data.
	Async bool
	// RNRTimer is the wait per RNR retry: a SEND that finds no receive posted fails after
	// RNRRetryCount*RNRTimer (at once for a count of 0; never for 7). Default 2 ms.
	RNRTimer time.Duration
	// RetryTimeout is how long a work request aimed at a peer that no longer answers (vanished,
	// closed, removed, or its QP in the error state) waits before it completes with
	// StatusTransportRetryExceeded. Default 10 ms.
	RetryTimeout time.Duration
	// DelayEstablished holds the target's EventEstablished back until its first receive
	// completion has been queued, as happens on real fabrics when the first SEND beats the RTU.
	DelayEstablished bool
	// Backlog is the number of connection requests a listener queues before Connect fails
	// with ib.ErrQueueFull. Default 128.
	Backlog int
	// IWARP applies the iWARP rule that RDMA READ sinks must be registered with
	// ib.AccessRemoteWrite as well as ib.AccessLocalWrite: RDMAP places the READ response
	// through the sink's STag like an RDMA WRITE (the kernel's rdma_rw registers iWARP READ
	// sinks with IB_ACCESS_REMOTE_WRITE for this reason). An RDMA READ into a region without
	// it completes with ib.StatusLocalProtectionError (real RNICs report it in different
	// ways, always as a fatal error on the QP). Set Limits.MaxReadSGE to 1 as well to model
	// siw. The other iWARP differences (private data of the sender's length, no IB port
	// space) are not modelled.
	IWARP bool
	// Shared are the limits for shared CQs and SRQs (ib.SharedQueues); zero means
	// DefaultSharedLimits. MaxSRQWR -1 models a device without SRQs.
	Shared ib.SharedLimits
}
