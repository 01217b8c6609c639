package config

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/srptarget/srptarget/backstore/rbd"
	"github.com/srptarget/srptarget/srp"
)

// Config is the daemon's configuration file. Every field is documented in configs/README.md;
// unknown keys are errors, so a typo never silently falls back to a default.
type Config struct {
	Target    Target     `yaml:"target"`
	Listeners []Listener `yaml:"listeners"`
	Limits    Limits     `yaml:"limits"`
	LUNs      []LUN      `yaml:"luns"`
	ACLs      []ACL      `yaml:"acls"`
	ALUA      *ALUA      `yaml:"alua"`
	// StateDir is where the persistent reservations an initiator asked to keep through a
	// power loss (APTPL) are saved, one file per logical unit; default /var/lib/srptarget.
	StateDir string `yaml:"state_dir"`

	// file and root are where the configuration came from, so that errors found after
	// validation (a backstore that fails to open) can still name the file and line.
	file string
	root *yaml.Node
	// textOnly: it came from ParseText, and validating it again looks at no path either.
	textOnly bool
	// warnings are problems that do not stop the configuration from loading, such as a path
	// that the user who validates cannot look at (the daemon may run as another user).
	warnings Errors
}

// Warnings returns what validation found questionable but not wrong.
func (c *Config) Warnings() Errors { return c.warnings }

// Target is the target's SRP identity. Both halves of the target port identifier an
// initiator names in add_target must match: id_ext and ioc_guid.
type Target struct {
	// IDExt and IOCGUID are 64-bit values written as 16 hex digits (an optional 0x and colons
	// are accepted). When absent they are derived from the RDMA device's node GUID.
	IDExt   string `yaml:"id_ext"`
	IOCGUID string `yaml:"ioc_guid"`
	// RelativePortID is the RELATIVE TARGET PORT IDENTIFIER of this target port (default 1).
	RelativePortID uint16 `yaml:"relative_port_id"`
	// Ports are further target ports of this daemon, each a path of its own in the ALUA
	// target port groups.
	Ports []Port `yaml:"ports"`
}

// Port is one more SRP target port: another target port identifier on the same
// listeners, and another SCSI target port.
type Port struct {
	// IDExt is required; IOCGUID defaults to the target's ioc_guid.
	IDExt          string `yaml:"id_ext"`
	IOCGUID        string `yaml:"ioc_guid"`
	RelativePortID uint16 `yaml:"relative_port_id"`
}

// ALUA is the asymmetric logical unit access configuration: the target port groups and
// their states, which a reload may change. Without it every port of the daemon is in one
// active/optimized group, 0.
type ALUA struct {
	Groups []PortGroup `yaml:"groups"`
}

// PortGroup is one target port group.
type PortGroup struct {
	ID *int `yaml:"id"`
	// State is active/optimized, active/non-optimized, standby, unavailable or transitioning.
	State string `yaml:"state"`
	// Preferred sets PREF in REPORT TARGET PORT GROUPS.
	Preferred bool `yaml:"preferred"`
	// Ports are relative target port identifiers: this daemon's (target.relative_port_id and
	// target.ports) and others' (another daemon in front of the same storage).
	Ports []int `yaml:"ports"`
}

// Listener is where logins arrive: an IP address and port, for RDMA/CM logins (ib_srp's
// dest=), or with Kind ib the InfiniBand ports, for native IB CM logins (ib_srp's
// dgid=...,service_id=00000000013fPPPP).
type Listener struct {
	// Kind is address (the default) or ib.
	Kind string `yaml:"kind"`
	// Address is an IPv4 or IPv6 address, "0.0.0.0" or "::" for all; IPv6 link-local addresses
	// carry their zone ("fe80::1%eth0"). Address listeners only.
	Address string `yaml:"address"`
	// Port is the TCP-space port of an address listener, the low 16 bits of the service ID
	// 0x00000000013FPPPP of an ib listener.
	Port uint16 `yaml:"port"`
	// IBPorts names the HCA ports an ib listener binds, as device/port: "mlx5_0/1". Unset,
	// every InfiniBand port of every device, present and future.
	IBPorts []string `yaml:"ib_ports"`
}

// Listener kinds (Listener.Kind).
const (
	ListenerAddress = "address"
	ListenerIB      = "ib"
)

// IsIB reports whether l is an ib listener.
func (l Listener) IsIB() bool { return l.Kind == ListenerIB }

// HasIBListener reports whether c has an ib listener.
func (c *Config) HasIBListener() bool {
	for _, l := range c.Listeners {
		if l.IsIB() {
			return true
		}
	}
	return false
}

// HasAddressListener reports whether c has an address listener.
func (c *Config) HasAddressListener() bool {
	for _, l := range c.Listeners {
		if !l.IsIB() {
			return true
		}
	}
	return false
}

// Limits bounds what one initiator can use. The keys are named as the engine's log
// messages name them (a login refused for its IU length says "raise limits.max_it_iu_len").
// Each key's default, range and engine field are one row of limitSpecs (limits.go).
type Limits struct {
	// MaxIUSize is the largest information unit an initiator may send (SRP MAXIMUM
	// INITIATOR-TO-TARGET IU LENGTH, the size of each receive buffer). Linux with immediate
	// data asks for 8260 bytes; the default 8276 (LIO's) accepts it.
	MaxIUSize Size `yaml:"max_it_iu_len"`
	// Credits is the number of commands one channel may have outstanding (receive buffers).
	Credits int `yaml:"credits"`
	// MaxChannels is the most channels one initiator may open in one session (ib_srp ch_count).
	MaxChannels int `yaml:"max_channels"`
	// MaxTransferSize is the largest data transfer of one command.
	MaxTransferSize Size `yaml:"max_transfer_size"`
	// SendQueueDepth is the send queue depth of each channel (clamped to the device's limit).
	SendQueueDepth int `yaml:"send_queue_depth"`
	// BufferPoolSize is the data-buffer memory registered per RDMA device, shared by its
	// channels; a command waits for a buffer when it is all in use.
	BufferPoolSize Size `yaml:"buffer_pool_size"`
	// ImmediateData grants SRP-2 immediate data to initiators that ask for it (default true).
	ImmediateData *bool `yaml:"immediate_data"`
	// Completion is how an idle channel waits for work: event (sleep until the completion
	// queue raises an event), adaptive (keep polling for poll_window after the last work,
	// then sleep) or poll (never sleep: one busy CPU per channel). docs/benchmarks.md has the
	// measurements behind the default.
	Completion string `yaml:"completion"`
	// PollWindow is how long an adaptive channel keeps polling after its last work ("50us").
	PollWindow Duration `yaml:"poll_window"`
	// RDMATimeout is how long a channel's RDMA work may make no progress before the channel
	// is closed and its buffers freed (an initiator that stopped taking responses), as a Go
	// duration ("30s"). Task management waits are bounded by it too.
	RDMATimeout Duration `yaml:"rdma_timeout"`
	// MaxInitiatorBuffer is how much of the buffer pool one initiator may hold, all its
	// channels together, counted per session and per source address: a size ("16MiB") or a
	// percentage of buffer_pool_size ("25%").
	MaxInitiatorBuffer string `yaml:"max_initiator_buffer"`
	// MaxSessions bounds the initiator sessions (I_T nexuses) the target keeps.
	MaxSessions int `yaml:"max_sessions"`
	// MaxChannelsTotal bounds the channels of all initiators together.
	MaxChannelsTotal int `yaml:"max_channels_total"`
	// MaxSessionsPerSource and MaxChannelsPerSource bound the sessions and channels from one
	// source address, so that one host cannot fill max_sessions or max_channels_total.
	MaxSessionsPerSource int `yaml:"max_sessions_per_source"`
	MaxChannelsPerSource int `yaml:"max_channels_per_source"`
	// IdleTimeout closes a channel that received nothing and held nothing for that long
	// ("10m"); 0 (the default) never does.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxLoginsInProgress bounds the logins handled at once; more are refused at once.
	MaxLoginsInProgress int `yaml:"max_logins_in_progress"`
	// PollGroups is the number of poll groups, the goroutines that run the channels' data
	// path; unset, one per CPU the daemon may use less one.
	PollGroups int `yaml:"poll_groups"`
	// SRQDepth is the receive buffers of each poll group's shared receive queue per device;
	// -1 gives every channel receive buffers of its own.
	SRQDepth int `yaml:"srq_depth"`
	// Scheduling is the Linux scheduling policy of the daemon's threads (sched(7)): inherit
	// (the one it was started with: systemd's CPUSchedulingPolicy=, chrt(1)), normal
	// (SCHED_OTHER) or batch (SCHED_BATCH: a waking thread does not preempt the running
	// one). Unset, batch when the daemon may run on one CPU only, else inherit
	// (SchedulingFor).
	Scheduling string `yaml:"scheduling"`
	// BackstoreIO is how file and block LUNs are read and written: auto (io_uring where it
	// works, else sync), sync (a blocking call per command on a worker goroutine) or io_uring
	// (refuse to start without it).
	BackstoreIO string `yaml:"backstore_io"`
}

// Scheduling policies (Limits.Scheduling).
const (
	SchedulingInherit = "inherit"
	SchedulingNormal  = "normal"
	SchedulingBatch   = "batch"
)

// DefaultScheduling is the scheduling policy unless configured: SchedulingFor the CPUs this
// process may run on.
var DefaultScheduling = SchedulingFor(runtime.NumCPU())

// SchedulingFor is the default scheduling policy of a daemon that may run on ncpu CPUs:
// batch on one CPU, otherwise the policy it was started with. On one CPU each of the daemon's own threads that
// wakes (the Go runtime's sysmon every 20 µs while a goroutine is in a system call, the
// thread it starts to take over the goroutine's P, the thread that waits in epoll) preempts
// the thread doing the work, in the middle of soft-RoCE's protocol work inside
// ibv_post_send; SCHED_BATCH lets the running thread finish (kernel/sched/fair.c,
// check_preempt_wakeup: no wake-up preemption for SCHED_BATCH); docs/benchmarks.md has what
// it saves on a one-CPU host. With more CPUs a waking thread usually finds an idle one; there
// it was not measured, so the default leaves the policy alone.
func SchedulingFor(ncpu int) string {
	if ncpu <= 1 {
		return SchedulingBatch
	}
	return SchedulingInherit
}

// LUN is one logical unit.
type LUN struct {
	LUN *int `yaml:"lun"`
	// Backstore is file, block, memory, null or rbd.
	Backstore BackstoreKind `yaml:"backstore"`
	// Path is the file or block device (file and block backstores).
	Path string `yaml:"path"`
	// Size is the capacity (file with create, memory, null), e.g. 10GiB.
	Size Size `yaml:"size"`
	// Create makes the file, sparse, when it does not exist.
	Create bool `yaml:"create"`
	// ReadOnly write-protects the LUN for everyone.
	ReadOnly bool `yaml:"read_only"`
	// BlockSize is the logical block size: 512 (default), 1024, 2048 or 4096. A block
	// backstore has the device's own: it is 0 there.
	BlockSize int `yaml:"block_size"`
	// PhysicalBlockSize is the physical block size the LUN reports (READ CAPACITY(16), Block
	// Limits): a power of two from the logical block size to 64 KiB, 0 for the backstore's
	// own (the logical block size, a block device's physical block, 4 KiB for RBD). 4096
	// with 512-byte blocks makes a 512e disk: initiators align their I/O and discards to it.
	PhysicalBlockSize int `yaml:"physical_block_size"`
	// Serial is the unit serial number; default derived from the target identity and LUN.
	Serial string `yaml:"serial"`
	// Vendor, Product and Revision are the INQUIRY strings (8, 16 and 4 characters at most).
	Vendor   string `yaml:"vendor"`
	Product  string `yaml:"product"`
	Revision string `yaml:"revision"`
	// WriteCache is the initial WCE bit (default true): with it off every write is durable
	// before it completes.
	WriteCache *bool `yaml:"write_cache"`
	// ThinProvisioning advertises UNMAP and WRITE SAME with UNMAP (default true where the
	// backstore can deallocate).
	ThinProvisioning *bool `yaml:"thin_provisioning"`
	// AllowSharedFile accepts a file that another user owns or that its group or others can
	// write, or a world-writable device node (file and block). Without it such a backstore is
	// refused: whoever can write it reads and changes what every initiator stores there.
	AllowSharedFile bool `yaml:"allow_shared_file"`
	// RBD names the Ceph RBD image of an rbd backstore and how to reach its cluster.
	RBD *RBD `yaml:"rbd"`
}

// RBD is the image and the cluster of an rbd backstore (package rbd's Options, whose keys it
// takes inline) and where its persistent reservations live. It holds only comparable values,
// so that it can be part of the key that keeps an open image across reloads.
type RBD struct {
	rbd.Options `yaml:",inline"`
	// PRStore says where the LUN's persistent reservations live: "rados" (the default), in
	// a RADOS object beside the image that every gateway serving the image shares, or
	// "local", in this daemon's memory and state_dir.
	PRStore string `yaml:"pr_store"`
	// PRLease is how long a gateway trusts its copy of the shared reservations after it last
	// found it current (pr_store: rados; default 5s).
	PRLease Duration `yaml:"pr_lease"`
}

// Where an rbd LUN's persistent reservations live (RBD.PRStore).
const (
	PRStoreRADOS = "rados"
	PRStoreLocal = "local"
)

// Defaults of an rbd backstore.
const (
	DefaultRBDPRLease = 5 * time.Second
)

// ACL grants a set of initiators access to LUNs. An initiator matches when its port
// identifier matches one of Initiators or its source address one of Sources; the first
// matching ACL wins.
type ACL struct {
	// Name names the ACL in sessions, acl-check, the log and the metrics' acl label (default
	// acls[N], which moves when an ACL is inserted before it): letters, digits, '.', '_' and
	// '-', unique.
	Name string `yaml:"name"`
	// PerInitiatorMetrics gives each initiator this ACL admits series of its own in the
	// per-initiator metrics (an initiator label), up to MaxInitiatorSeries initiators for the
	// whole daemon; without it they are summed per ACL.
	PerInitiatorMetrics bool `yaml:"per_initiator_metrics"`
	// Initiators are initiator port identifiers (0x and 32 hex digits) with shell-style
	// wildcards: "*" matches any initiator.
	Initiators []string `yaml:"initiators"`
	// Sources are source addresses or prefixes ("192.168.1.7", "10.0.0.0/8", "fe80::/10"),
	// which match logins through address listeners, and for logins through ib listeners GIDs
	// or GID prefixes ("gid:fe80::2:c903:a0:b0c2", "gid:fe80::/64") and partitions
	// ("pkey:8001"); ParseSource.
	Sources []string `yaml:"sources"`
	// LUNs are the LUN numbers these initiators see.
	LUNs []int `yaml:"luns"`
	// ReadOnly write-protects those LUNs for these initiators.
	ReadOnly bool `yaml:"read_only"`
}

// MaxInitiatorSeries bounds the initiators that get series of their own
// (ACL.PerInitiatorMetrics): the later ones share the initiator label "other".
const MaxInitiatorSeries = 64

// Label is how the ACL at index i is named: its name, or acls[i].
func (a *ACL) Label(i int) string {
	if a.Name != "" {
		return a.Name
	}
	return fmt.Sprintf("acls[%d]", i)
}

// Defaults.
const (
	DefaultMaxIUSize       = srp.DefaultMaxITIULen
	DefaultCredits         = srp.DefaultCredits
	DefaultMaxChannels     = srp.DefaultMaxChannels
	DefaultMaxTransferSize = srp.DefaultMaxTransferLen
	DefaultBlockSize       = 512
	// MaxPhysicalBlockSize bounds physical_block_size.
	MaxPhysicalBlockSize  = 64 << 10
	DefaultSendQueueDepth = srp.DefaultSendQueueDepth
	DefaultBufferPoolSize = srp.DefaultBufferPoolSize
	DefaultRDMATimeout    = srp.DefaultRDMATimeout
	// DefaultMaxInitiatorBuffer is the share of the buffer pool one initiator may hold.
	DefaultMaxInitiatorBuffer  = "25%"
	DefaultMaxSessions         = srp.DefaultMaxSessions
	DefaultMaxChannelsTotal    = srp.DefaultMaxChannelsTotal
	DefaultMaxLoginsInProgress = srp.DefaultMaxLoginsInProgress
	// MinIUSize is the smallest MAX IT IU LENGTH that still lets Linux log in without
	// immediate data with its default 12 descriptors (48 + 16 + 20 + 12 × 16 = 276) — Linux
	// with immediate data needs 8260.
	MinIUSize = 276
	MaxLUN    = 0x3FFF
)

// BackstoreKind is file, block, memory or null. YAML reads a bare `null` as "no value", so
// Parse looks at the document to tell `backstore: null` from a missing backstore.
type BackstoreKind string

// Size is a byte count written as a number or with a binary unit: 4096, 512KiB, 10GiB, 1TiB.
type Size int64

// Error is a validation error at a place in the file.
type Error struct {
	File string
	Line int    // 0 when unknown
	Path string // e.g. luns[1].size
	Msg  string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Path != "" {
		return fmt.Sprintf("%s: %s: %s", loc, e.Path, e.Msg)
	}
	return fmt.Sprintf("%s: %s", loc, e.Msg)
}

// Errors is every problem found in one file.
type Errors []*Error

// AsErrors is err as a list of configuration errors: the Errors it wraps, or the one Error; nil
// when it is neither (a file that cannot be read, say).
func AsErrors(err error) Errors {
	var errs Errors
	var one *Error
	switch {
	case errors.As(err, &errs):
		return errs
	case errors.As(err, &one):
		return Errors{one}
	}
	return nil
}

func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}
