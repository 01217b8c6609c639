package srp

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// Defaults of Limits. They follow LIO's ib_srpt where LIO has an equivalent, so that an
// initiator configured for LIO logs in here unchanged.
const (
	// DefaultMaxITIULen accepts the 8260-byte logins of Linux initiators using immediate data
	// (68 + max_imm_data 8192) with LIO's margin: LIO's srp_max_req_size default is
	// max(48 + 16 + 20 + 128 × 16, 80 + 4 + 8192) = 8276.
	DefaultMaxITIULen = 8276
	// DefaultMaxTIIULen is the size of the initiator's receive buffers. LIO's srp_max_rsp_size
	// default is 256: room for SRP_RSP with 4 bytes of response data and 216 bytes of sense.
	DefaultMaxTIIULen = 256
	// DefaultCredits is the credits granted at login (LIO's MAX_SRPT_RQ_SIZE); each channel
	// posts one receive buffer more.
	DefaultCredits = 128
	// DefaultMaxChannels bounds the RDMA channels of one I_T nexus. ib_srp opens ch_count
	// channels: min(max(4 × NUMA nodes, the HCA's completion vectors), online CPUs) unless set.
	DefaultMaxChannels = 16
	// DefaultMaxTransferLen is the largest data transfer of one SRP_CMD: 8 MiB.
	DefaultMaxTransferLen = 8 << 20
	// DefaultMaxDescriptors bounds the direct descriptors of one command, in the IU or in an
	// external table: ib_srp's largest indirect_sg_entries.
	DefaultMaxDescriptors = 2048
	// DefaultBufferPoolSize is the registered data-buffer memory per RDMA device.
	DefaultBufferPoolSize = 64 << 20
	// DefaultBufferWait is how long a command waits for a data buffer before it is answered
	// with BUSY.
	DefaultBufferWait = 2 * time.Second
	// DefaultSendQueueDepth is the send queue depth per channel (LIO's srp_sq_size).
	DefaultSendQueueDepth = 4096
	// DefaultDrainTimeout bounds the wait for flush completions when a channel closes.
	DefaultDrainTimeout = 30 * time.Second
	// DefaultPollWindow is how long an adaptive channel keeps polling after its last work:
	// longer than an initiator's round trip under soft-RoCE in the benchmark VMs
	// (docs/benchmarks.md), so that a queue-depth-1 stream is served without a wake-up, and short enough that a channel
	// whose I/O has stopped sleeps again almost at once.
	DefaultPollWindow = 2 * time.Millisecond
	// DefaultSRQDepth is the depth of a poll group's shared receive queue on a device: four
	// channels' worth of the default credits (about 4.3 MiB of buffers with the default
	// max_it_iu_len), where receive queues of their own cost every channel 129 buffers.
	// SPDK's default is 4096 per poll group and device, SCST's srpt's 4095 per device.
	DefaultSRQDepth = 512
	// DefaultRDMATimeout is how long a channel's work requests may make no progress before
	// the channel is closed: long enough for a congested fabric or a busy initiator, short
	// enough that one initiator that stops taking its responses cannot hold the target's
	// buffers for long. SCST's srpt aborts commands whose completion did not come within 80 s
	// (ib_srpt.c RDMA_COMPL_TIMEOUT_S); Linux's SCSI layer times a command out after 30 s.
	DefaultRDMATimeout = 30 * time.Second
	// DefaultShare is the default share of the target's bounded resources one initiator may
	// hold (share.go): a quarter of the buffer pool (per session and per source address), of
	// max_sessions and of max_channels_total (per source address), so that an initiator that
	// stops completing its work, or a host that forges initiator port ids, holds at most that
	// much and the others keep three quarters.
	DefaultShare = 4
	// DefaultMaxSessions bounds the I_T nexuses the target remembers. Each live channel
	// registers about 1.2 MiB with the default credits and receive buffers of its own (its send
	// buffers alone, a twentieth of that, on a shared receive queue) and holds its contexts'
	// heap, and a session without channels a few kilobytes; 256 sessions with one channel each
	// is at most about 300 MiB.
	DefaultMaxSessions = 256
	// DefaultMaxChannelsTotal bounds the RDMA channels of the whole target (at most about
	// 1.2 MiB each, see DefaultMaxSessions): 512 is about 600 MiB.
	DefaultMaxChannelsTotal = 512
	// DefaultMaxLoginsInProgress bounds the logins handled at once. A login is quick unless
	// it waits for the nexus's previous channels to close (MULTI-CHANNEL ACTION single); a
	// flood of logins beyond this is refused at once instead of piling up goroutines.
	DefaultMaxLoginsInProgress = 32

	// MinTIIULen is the smallest MaxTIIULen: an SRP_RSP with 4 bytes of response data or the
	// largest sense data the SCSI layer produces.
	MinTIIULen = iu.RspMinSize + iu.TskMgmtRspDataSize + scsi.MaxSenseLength
	// maxTransferLimit keeps every RDMA work request under the 2 GiB message limit.
	maxTransferLimit = 1 << 30
	// poolMinBlock is the smallest data buffer the pool hands out.
	poolMinBlock = 4096
)

// Limits bound what one channel and one command may use. The zero value of every field means
// its default.
type Limits struct {
	// MaxITIULen is the MAXIMUM INITIATOR-TO-TARGET IU LENGTH: the size of each receive buffer.
	// Logins asking for more are rejected (a smaller answer would make ib_srp overrun the
	// buffers: drivers/infiniband/ulp/srp/ib_srp.c sizes its IUs from what it asked for).
	MaxITIULen uint32
	// MaxTIIULen is the MAXIMUM TARGET-TO-INITIATOR IU LENGTH advertised at login. ib_srp sizes
	// its receive ring with it once and does not resize on reconnect, so it is a constant of
	// the target, not negotiated per login.
	MaxTIIULen uint32
	// Credits is the initial REQUEST LIMIT DELTA of a channel (further bounded by the device's
	// max_qp_wr less one). The channel posts one receive buffer more than that, for the
	// SRP_CRED_RSP that answers an SRP_CRED_REQ without taking a credit.
	Credits int
	// MaxChannels bounds the RDMA channels of one I_T nexus.
	MaxChannels int
	// MaxTransferLen bounds the data of one command (the descriptors' total length).
	MaxTransferLen uint32
	// MaxDescriptors bounds the direct descriptors of one command.
	MaxDescriptors int
	// BufferPoolSize is the data-buffer memory registered per RDMA device, shared by its
	// channels. It is rounded up to a multiple of the largest buffer (MaxTransferLen rounded up
	// to a power of two).
	BufferPoolSize int64
	// BufferWait is how long a command waits for a data buffer when the pool is exhausted;
	// after that it ends with SCSI status BUSY, which the initiator retries.
	BufferWait time.Duration
	// SendQueueDepth is the send queue depth of each channel.
	SendQueueDepth int
	// WorkersPerChannel bounds the workers of a poll group (the goroutines that run commands
	// of logical units that block), per channel of the group, started as needed; the default
	// is Credits, so that every command an initiator may have outstanding can run.
	WorkersPerChannel int
	// DisableImmediateData refuses SRP-2 immediate data at login.
	DisableImmediateData bool
	// DrainTimeout bounds how long a closing channel waits for the flush completions of its
	// work requests before it closes the queue pair anyway.
	DrainTimeout time.Duration
	// RemoteWriteForReadSinks registers the data buffer pool with remote write access as well
	// as local write. iWARP needs it: the sink of an RDMA READ (where data-out and external
	// descriptor tables land) is written through its STag like the target of an RDMA WRITE,
	// so without remote write every SCSI WRITE that is not immediate data fails and takes the
	// channel down (the kernel's rdma_rw, drivers/infiniband/core/rw.c, registers iWARP READ
	// sinks with IB_ACCESS_REMOTE_WRITE for this reason). Leave it off on InfiniBand and RoCE: it lets the pool's rkey write target
	// memory, which nothing there needs. The pool's rkey is never sent to the initiator
	// either way.
	RemoteWriteForReadSinks bool
	// Completion is how a poll group with nothing to do waits for its next completion.
	Completion CompletionMode
	// PollWindow is how long a poll group in CompletionAdaptive keeps polling after its last
	// work before it sleeps.
	PollWindow time.Duration
	// RDMATimeout is how long a channel with work requests outstanding may see none of them
	// complete before it is closed as stalled: its commands are aborted and its buffers go
	// back to the pool. An initiator that posts no receive buffers leaves the target's
	// responses in RNR retry for ever (ib_srp asks for an infinite RNR retry count, and the
	// target cannot change it once connected), with each command's data buffer held; this
	// bounds how long. Task management waits are bounded by it as well.
	RDMATimeout time.Duration
	// MaxInitiatorBuffer bounds the data-buffer memory one initiator may hold at once, all
	// its channels together, counted per session (I_T nexus) and per source address, so that
	// one initiator cannot take the pool of a device whatever its number of channels or
	// forged initiator port ids: a command that would go beyond it waits like one that finds
	// the pool empty (then BUSY). An initiator that holds nothing may always take one
	// command's buffers, so no command is refused for it. Default: a quarter of
	// BufferPoolSize (DefaultShare).
	MaxInitiatorBuffer int64
	// MaxSessions bounds the I_T nexuses the target keeps. A session without channels is
	// kept so that unit attentions reach its initiator when it logs in again; when a new
	// nexus needs room, the one without channels the longest is forgotten. A login that
	// finds every session with channels is refused with INSUFFICIENT RESOURCES.
	MaxSessions int
	// MaxChannelsTotal bounds the RDMA channels of the target across all nexuses (each pins
	// its receive and send buffers); a login beyond it is refused with INSUFFICIENT
	// RESOURCES.
	MaxChannelsTotal int
	// MaxSessionsPerSource bounds the I_T nexuses with logins or channels from one source
	// address, and MaxChannelsPerSource its channels, so that one host cannot fill
	// MaxSessions or MaxChannelsTotal (initiator port identifiers cost nothing to forge) and
	// lock out the others; logins beyond are refused with INSUFFICIENT RESOURCES. Default: a
	// quarter of MaxSessions and of MaxChannelsTotal (DefaultShare), at least 1.
	MaxSessionsPerSource int
	MaxChannelsPerSource int
	// IdleTimeout closes a channel that has received nothing and held nothing (no command,
	// no data buffer, no work request outstanding) for that long, returning its memory; an
	// initiator that uses the channel again reconnects (ib_srp does, after its
	// reconnect_delay). 0, the default, never closes an idle channel: a multipath initiator's
	// spare paths and channels are idle by design.
	IdleTimeout time.Duration
	// MaxLoginsInProgress bounds the connection requests being answered at once; a request
	// beyond it is refused at once with INSUFFICIENT RESOURCES.
	MaxLoginsInProgress int
	// BackstoreIO is how file and block logical units are read and written: BackstoreIOAuto
	// (the zero value), BackstoreIOSync or BackstoreIOURing.
	BackstoreIO BackstoreIO
	// PollGroups is the number of poll groups: goroutines that each run the data path of the
	// channels assigned to them (group.go). Default: one per CPU the process may use (the
	// smaller of GOMAXPROCS and the CPUs), less one left for the network poller, timers and
	// the control path, and at least one.
	PollGroups int
	// SRQDepth is the receive buffers of the shared receive queue of each poll group on each
	// device, which its channels' IUs land in instead of receive queues of their own; each
	// channel's credits are bounded by it. -1 gives every channel its own receive queue, as
	// does a device without shared receive queues. Default DefaultSRQDepth.
	SRQDepth int
}

// DefaultPollGroups is the number of poll groups unless configured: one per CPU the process
// may use, less one, at least one. The one left is for Go's network poller: a group that
// polls keeps its P, and the netpoller runs on an idle P (on a busy one only every 10 ms,
// from sysmon), so groups on every P would make RDMA/CM events and the control socket wait.
func DefaultPollGroups() int {
	return max(min(runtime.GOMAXPROCS(0), runtime.NumCPU())-1, 1)
}

// DefaultCompletion is how channels wait for completions unless configured (see
// CompletionMode): CompletionFor the CPUs this process may run on.
var DefaultCompletion = CompletionFor(runtime.NumCPU())

// CompletionFor is the default completion mode for a daemon that may run on ncpu CPUs:
// adaptive, unless there is only one. On a one-CPU host the poll window is spent on the CPU
// that the kernel's own RDMA work needs: soft-RoCE's requester, responder and completer run
// there too, so every microsecond the channel polls for its next completion delays that
// completion (measured in docs/benchmarks.md, "What the measurements showed"). What counts is
// the CPUs, not GOMAXPROCS: with GOMAXPROCS=1 on a bigger host the kernel still has the other
// CPUs.
func CompletionFor(ncpu int) CompletionMode {
	if ncpu <= 1 {
		return CompletionEvent
	}
	return CompletionAdaptive
}

// CompletionMode is how a poll group waits for completions when none of its channels has
// anything to do. Its completion queues raise an event only when armed; an event wakes the
// group's goroutine. Polling avoids the wake-up at the cost of CPU time spent spinning.
type CompletionMode uint8

const (
	// CompletionDefault means DefaultCompletion.
	CompletionDefault CompletionMode = iota
	// CompletionEvent arms the completion queues and sleeps as soon as the group has nothing
	// to do.
	CompletionEvent
	// CompletionAdaptive keeps polling for PollWindow after the last work, then arms and
	// sleeps: with a window longer than the initiators' round trip, a stream of I/O (queue
	// depth 1 included) is served without wake-ups; a group idle for a window costs nothing.
	CompletionAdaptive
	// CompletionPoll never sleeps while the group has channels: one CPU per group, busy.
	CompletionPoll
)

// String names the mode as the configuration does.
func (m CompletionMode) String() string {
	switch m {
	case CompletionDefault:
		return "default"
	case CompletionEvent:
		return "event"
	case CompletionAdaptive:
		return "adaptive"
	case CompletionPoll:
		return "poll"
	}
	return fmt.Sprintf("CompletionMode(%d)", uint8(m))
}

// ParseCompletionMode parses the configuration's names for the modes.
func ParseCompletionMode(s string) (CompletionMode, error) {
	for m := CompletionEvent; m <= CompletionPoll; m++ {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("completion mode %q: want event, adaptive or poll", s)
}

// withDefaults returns l with zero fields replaced by their defaults.
func (l Limits) withDefaults() Limits {
	for _, k := range limitKnobs {
		if k.fill != nil {
			k.fill(&l)
		}
	}
	return l
}

// validate checks limits that already have their defaults. Its ranges are what the engine
// needs to stay correct and within memory; an operator's ranges, narrower, are the
// configuration's (config/limits.go).
func (l Limits) validate() error {
	for _, k := range limitKnobs {
		if err := k.check(&l); err != nil {
			return err
		}
	}
	return nil
}

// limitKnob is one field of Limits: its default, filled in where the field is zero (none:
// zero stands), and the range the engine needs.
type limitKnob struct {
	fill  func(*Limits)
	check func(*Limits) error
}

// limitKnobs are the fields of Limits, one row each. A default that depends on another field
// (workers on credits, the shares on the totals) comes after it.
var limitKnobs = []limitKnob{
	knob(func(l *Limits) *uint32 { return &l.MaxITIULen }, is[uint32](DefaultMaxITIULen),
		between[uint32]("max IT IU length", iu.CmdMinSize+iu.IndirectBufHeaderSize+iu.DirectBufSize, 1<<20)),
	knob(func(l *Limits) *uint32 { return &l.MaxTIIULen }, is[uint32](DefaultMaxTIIULen), between[uint32]("max TI IU length", MinTIIULen, 1<<16)),
	knob(func(l *Limits) *int { return &l.Credits }, is(DefaultCredits), between("credits", 2, 1<<15)),
	knob(func(l *Limits) *int { return &l.MaxChannels }, is(DefaultMaxChannels), atLeast("max channels", 1)),
	knob(func(l *Limits) *uint32 { return &l.MaxTransferLen }, is[uint32](DefaultMaxTransferLen),
		between[uint32]("max transfer length", poolMinBlock, maxTransferLimit)),
	knob(func(l *Limits) *int { return &l.MaxDescriptors }, is(DefaultMaxDescriptors), between("max descriptors", 1, 1<<16)),
	knob(func(l *Limits) *int64 { return &l.BufferPoolSize }, is[int64](DefaultBufferPoolSize), func(l *Limits, v int64) error {
		if v < int64(l.MaxTransferLen) {
			return fmt.Errorf("buffer pool size %d is smaller than the max transfer length %d", v, l.MaxTransferLen)
		}
		return nil
	}),
	knob(func(l *Limits) *time.Duration { return &l.BufferWait }, is(DefaultBufferWait), notNegative[time.Duration]("buffer wait")),
	knob(func(l *Limits) *int { return &l.SendQueueDepth }, is(DefaultSendQueueDepth), atLeast("send queue depth", 16)),
	knob(func(l *Limits) *int { return &l.WorkersPerChannel }, func(l *Limits) int { return l.Credits }, atLeast("workers per channel", 1)),
	knob(func(l *Limits) *time.Duration { return &l.DrainTimeout }, is(DefaultDrainTimeout), notNegative[time.Duration]("drain timeout")),
	knob(func(l *Limits) *CompletionMode { return &l.Completion }, is(DefaultCompletion), func(_ *Limits, v CompletionMode) error {
		if v > CompletionPoll {
			return fmt.Errorf("completion mode %v unknown", v)
		}
		return nil
	}),
	knob(func(l *Limits) *BackstoreIO { return &l.BackstoreIO }, nil, func(_ *Limits, v BackstoreIO) error {
		if v > BackstoreIOURing {
			return fmt.Errorf("backstore I/O %v unknown", v)
		}
		return nil
	}),
	knob(func(l *Limits) *time.Duration { return &l.PollWindow }, is(DefaultPollWindow), func(_ *Limits, v time.Duration) error {
		if v < 0 || v > time.Second {
			return fmt.Errorf("poll window %v outside [0, 1s]", v)
		}
		return nil
	}),
	knob(func(l *Limits) *time.Duration { return &l.RDMATimeout }, is(DefaultRDMATimeout), atLeast("RDMA timeout", time.Millisecond)),
	knob(func(l *Limits) *int64 { return &l.MaxInitiatorBuffer }, func(l *Limits) int64 { return l.BufferPoolSize / DefaultShare },
		atLeast[int64]("max initiator buffer", poolMinBlock)),
	knob(func(l *Limits) *int { return &l.MaxSessions }, is(DefaultMaxSessions), atLeast("max sessions", 1)),
	knob(func(l *Limits) *int { return &l.MaxChannelsTotal }, is(DefaultMaxChannelsTotal), atLeast("max channels total", 1)),
	knob(func(l *Limits) *int { return &l.MaxSessionsPerSource }, func(l *Limits) int { return max(1, l.MaxSessions/DefaultShare) },
		atLeast("max sessions per source", 1)),
	knob(func(l *Limits) *int { return &l.MaxChannelsPerSource }, func(l *Limits) int { return max(1, l.MaxChannelsTotal/DefaultShare) },
		atLeast("max channels per source", 1)),
	knob(func(l *Limits) *time.Duration { return &l.IdleTimeout }, nil, notNegative[time.Duration]("idle timeout")),
	knob(func(l *Limits) *int { return &l.MaxLoginsInProgress }, is(DefaultMaxLoginsInProgress), atLeast("max logins in progress", 1)),
	knob(func(l *Limits) *int { return &l.PollGroups }, func(*Limits) int { return DefaultPollGroups() }, between("poll groups", 1, 1024)),
	knob(func(l *Limits) *int { return &l.SRQDepth }, is(DefaultSRQDepth), between("shared receive queue depth", -1, 1<<20)),
}

// knob is the row of the field that field points to: def gives its default (nil: none), check
// its range.
func knob[T ~int | ~uint8 | ~uint32 | ~int64](field func(*Limits) *T, def func(*Limits) T, check func(*Limits, T) error) limitKnob {
	k := limitKnob{check: func(l *Limits) error { return check(l, *field(l)) }}
	if def != nil {
		k.fill = func(l *Limits) {
			if p := field(l); *p == 0 {
				*p = def(l)
			}
		}
	}
	return k
}

// is is a default that depends on no other field.
func is[T any](v T) func(*Limits) T { return func(*Limits) T { return v } }

func between[T ~int | ~uint32](name string, lo, hi T) func(*Limits, T) error {
	return func(_ *Limits, v T) error {
		if v < lo || v > hi {
			return fmt.Errorf("%s %d outside [%d, %d]", name, v, lo, hi)
		}
		return nil
	}
}

func atLeast[T ~int | ~int64](name string, lo T) func(*Limits, T) error {
	return func(_ *Limits, v T) error {
		if v < lo {
			return fmt.Errorf("%s %v is less than %v", name, v, lo)
		}
		return nil
	}
}

func notNegative[T ~int64](name string) func(*Limits, T) error {
	return func(_ *Limits, v T) error {
		if v < 0 {
			return fmt.Errorf("%s %v is negative", name, v)
		}
		return nil
	}
}

// Authorizer decides which initiators may log in and what they see. It is consulted for every
// login and again for every live session when Target.SetAuthorizer installs a new one
// (configuration reload).
type Authorizer interface {
	// Authorize returns the LUN map that initiator sees through target, or an error to refuse
	// the login. A *LoginRefusedError selects the SRP_LOGIN_REJ reason; any other error is
	// answered with CHANNEL LIMIT REACHED (0x00010006), which is what LIO answers when its ACL
	// refuses an initiator. src is the initiator's address.
	Authorize(initiator, target iu.PortID, src netip.AddrPort) (*scsi.LUNMap, error)
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(initiator, target iu.PortID, src netip.AddrPort) (*scsi.LUNMap, error)

// Authorize calls f.
func (f AuthorizerFunc) Authorize(initiator, target iu.PortID, src netip.AddrPort) (*scsi.LUNMap, error) {
	return f(initiator, target, src)
}

// AllowAll is an Authorizer that shows m to every initiator.
func AllowAll(m *scsi.LUNMap) Authorizer {
	return AuthorizerFunc(func(iu.PortID, iu.PortID, netip.AddrPort) (*scsi.LUNMap, error) { return m, nil })
}

// LoginRefusedError is how an Authorizer refuses a login with a specific reason. Detail says
// why and what to change, for the log line the target writes.
type LoginRefusedError struct {
	Reason iu.LoginRejReason
	Detail string
}

func (e *LoginRefusedError) Error() string {
	return fmt.Sprintf("login refused (%v): %s", e.Reason, e.Detail)
}

// ErrNotAuthorized is a convenience error for Authorizers: the initiator is in no ACL.
var ErrNotAuthorized = errors.New("initiator not authorized")

// Port is an SRP target port identifier and the SCSI target port it stands for.
type Port struct {
	ID   iu.PortID
	SCSI *scsi.TargetPort
}

// Config configures a Target.
type Config struct {
	// TargetPortID is the SRP target port identifier the target accepts logins for: id_ext in
	// bytes 0-7 and ioc_guid in bytes 8-15, as given to ib_srp's add_target.
	TargetPortID iu.PortID
	// TargetPort is the SCSI target port VPD page 0x83 reports. Nil: one named after
	// TargetPortID with relative port identifier 1.
	TargetPort *scsi.TargetPort
	// MorePorts are further SRP target ports the target accepts logins for, on every
	// listener, each its own SCSI target port: a path in another target port group (ALUA)
	// needs a target port of its own, and Linux's ib_srp refuses a second add_target with the
	// same id_ext, ioc_guid and initiator_ext (srp_conn_unique in
	// drivers/infiniband/ulp/srp/ib_srp.c), so one initiator reaches both over two ports.
	MorePorts []Port
	// Limits bound channels and commands.
	Limits Limits
	// Authorizer decides who may log in; it may be replaced later with SetAuthorizer. Nil
	// refuses every login until SetAuthorizer is called.
	Authorizer Authorizer
	// SessionForgotten, when set, receives the I/O counters of a session the target forgets
	// (an idle one, to make room under Limits.MaxSessions), so that whoever sums them
	// (Target.SessionIO) keeps what it counted. It runs outside the target's locks.
	SessionForgotten func(SessionIOInfo)
	// Logger receives structured logs; nil discards them.
	Logger *zap.Logger
	// MeasureLatency times each command from its IU's arrival to the posting of its response
	// for the logical units' latency histograms (scsi.LUStats). It costs a clock read per
	// completion batch and per post, a few percent of a 4 KiB round trip at queue depth 1, so it
	// is on only when someone reads the histograms (the daemon's --metrics); without it the
	// commands are counted with a latency of 0.
	MeasureLatency bool
}
