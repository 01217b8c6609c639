package srptest

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/srp/iu"
)

// The initiator's configuration: ib_srp's constants and module parameters, and the settings a
// test may change. Filling in the defaults and checking them is in config_defaults.go.

// ib_srp constants (drivers/infiniband/ulp/srp/ib_srp.h, include/scsi/srp.h).
const (
	// DefaultQueueDepth is ib_srp's default queue_size: 62 commands (can_queue) + 1 slot for
	// a response to a target request + 1 for task management.
	DefaultQueueDepth = 64
	// DefaultCmdSGEntries is ib_srp's cmd_sg_entries default: direct descriptors in an SRP_CMD.
	DefaultCmdSGEntries = 12
	// MaxCmdSGEntries is the largest cmd_sg_entries ib_srp accepts.
	MaxCmdSGEntries = 255
	// DefaultMaxImmData is ib_srp's max_imm_data default.
	DefaultMaxImmData = 8192
	// ImmDataOffset is SRP_IMM_DATA_OFFSET: sizeof(struct srp_cmd) 48 + SRP_MAX_ADD_CDB_LEN 16 +
	// sizeof(struct srp_imm_buf) 4. ib_srp always asks for it and always uses it.
	ImmDataOffset = 68
	// MaxAddCDBLen is SRP_MAX_ADD_CDB_LEN: ib_srp reserves room for 16 bytes of additional CDB.
	MaxAddCDBLen = 16
	// DefaultRNRRetryCount is what ib_srp asks the target to use: 7, retry for ever.
	DefaultRNRRetryCount = 7
	// DefaultRetryCount is ib_srp's tl_retry_count default.
	DefaultRetryCount = 7
	// DefaultResponderResources is the RDMA READ depth ib_srp offers the target.
	DefaultResponderResources = 4
	// maxSGE is SRP_MAX_SGE: the initiator's send SGE limit (header + two data pieces for
	// immediate data).
	maxSGE = 3
)

// Toggle is a setting whose zero value means "as ib_srp does by default".
type Toggle uint8

const (
	// Default leaves the setting at ib_srp's default.
	Default Toggle = iota
	// On enables the setting.
	On
	// Off disables the setting.
	Off
)

func (t Toggle) enabled(def bool) bool {
	switch t {
	case On:
		return true
	case Off:
		return false
	}
	return def
}

// LoginForm selects the SRP_LOGIN_REQ layout.
type LoginForm uint8

const (
	// LoginFormRDMACM is the 56-byte struct srp_login_req_rdma that ib_srp sends through the
	// RDMA/CM (add_target with dest=): the form the target sees on RoCE, iWARP and IPoIB.
	LoginFormRDMACM LoginForm = iota
	// LoginFormIBCM is the 64-byte struct srp_login_req that ib_srp sends in an IB CM REQ
	// (add_target with dgid=). Login sends it raw (ib.FamilyIB) to the fabric's IB port
	// space, where a target listening as an AF_IB id (memfabric's Node.ListenIB) receives it
	// as the REQ's 92 bytes of private data.
	LoginFormIBCM
)

func (f LoginForm) String() string {
	switch f {
	case LoginFormRDMACM:
		return "RDMA/CM (56 bytes)"
	case LoginFormIBCM:
		return "IB CM (64 bytes)"
	}
	return fmt.Sprintf("login form %d", uint8(f))
}

// Config describes one initiator channel. The zero value of every field except Addr and the
// port identifiers means "as ib_srp by default".
type Config struct {
	// Addr is the target's listener.
	Addr netip.AddrPort
	// Node is the initiator's node on the fabric. If nil, Login makes one at Source. Reuse a
	// Channel's Node() to log in again from the same address, as ib_srp does on reconnect.
	Node *memfabric.Node
	// Source is the address of the node Login makes when Node is nil. If zero, Login picks a
	// free address in 198.18.0.0/15.
	Source netip.Addr

	// InitiatorPortID is the INITIATOR PORT IDENTIFIER (initiator_ext and the port GUID). If
	// zero, Login uses 8 zero bytes followed by an EUI-64 derived from the node address, the
	// way ib_srp uses the interface ID of GID 0.
	InitiatorPortID iu.PortID
	// TargetPortID is the TARGET PORT IDENTIFIER (id_ext and ioc_guid).
	TargetPortID iu.PortID

	// LoginForm selects the 56-byte RDMA/CM (default) or the 64-byte IB CM login layout.
	LoginForm LoginForm
	// Family is how the connection request is sent, and PortSpace the fabric port space it
	// goes to. Zero means the ones LoginForm belongs to: an IP-family request to
	// memfabric.PortSpaceTCP for LoginFormRDMACM (rdma_connect), a raw ib.FamilyIB request to
	// memfabric.PortSpaceIB for LoginFormIBCM (ib_srp's IB CM). Setting others sends a login
	// where a real initiator would not, for tests of the target's parsing (or of the
	// fabric's size limits).
	Family    ib.Family
	PortSpace memfabric.PortSpace
	// LoginTag is the TAG of SRP_LOGIN_REQ; ib_srp sends 0.
	LoginTag iu.Tag
	// ReqBufFmt is REQUIRED BUFFER FORMATS; zero means ib_srp's direct|indirect.
	ReqBufFmt iu.BufFmt
	// ExtraReqFlags are ORed into REQ FLAGS (e.g. the solicited-notification bits, which
	// ib_srp never sets).
	ExtraReqFlags iu.LoginReqFlags
	// MultiChannel is the MULTI-CHANNEL ACTION: iu.MultiChanSingle (the zero value, ib_srp's
	// first channel) or iu.MultiChanMulti (its other channels). LoginMulti sets it per channel.
	MultiChannel iu.LoginReqFlags
	// ChannelIndex is the hardware queue index that ib_srp puts in bits 31:16 of command tags
	// (blk_mq_unique_tag). LoginMulti numbers its channels 0..n-1; set it when a separate
	// Login joins an existing session, so that tags stay unique across the session.
	ChannelIndex uint16

	// ITIULen is the REQUESTED MAXIMUM INITIATOR-TO-TARGET IU LENGTH. Zero means ib_srp's
	// srp_max_it_iu_len(CmdSGEntries, ImmediateData): 8260 with the defaults. A non-zero value
	// is sent as is and, like ib_srp's max_it_iu_size, also caps the IU length used to decide
	// whether a write fits as immediate data.
	ITIULen uint32
	// ImmediateData requests immediate data at login (ib_srp's use_imm_data, on by default).
	ImmediateData Toggle
	// MaxImmData is ib_srp's max_imm_data (default 8192): it only enters the IT IU length.
	MaxImmData int
	// ImmDataOffset is the IMMEDIATE DATA OFFSET asked for at login and used in SRP_CMD; zero
	// means ib_srp's constant 68.
	ImmDataOffset uint16

	// QueueDepth is ib_srp's queue_size: receive buffers posted (default 64), and the
	// can_queue clamp min(credits-1, QueueDepth-2).
	QueueDepth int
	// CmdSGEntries is ib_srp's cmd_sg_entries: direct descriptors carried in an SRP_CMD
	// (default 12, at most 255).
	CmdSGEntries int
	// AllowExtSG is ib_srp's allow_ext_sg: with more than CmdSGEntries descriptors, send the
	// first CmdSGEntries in the IU and leave the whole table in initiator memory for the
	// target to RDMA READ. Without it such a command fails, as in ib_srp.
	AllowExtSG bool

	// RNRRetryCount is how often the target retries a SEND that finds no receive posted here:
	// 0 means ib_srp's 7 (for ever); a negative value asks for 0 retries.
	RNRRetryCount int
	// RetryCount is ib_srp's tl_retry_count (2..7, default 7). The in-memory fabric has no
	// transport retries; the value is only recorded.
	RetryCount int
	// ResponderResources is the RDMA READ depth offered to the target; 0 means ib_srp's 4.
	ResponderResources uint8

	// Timeout bounds the waits that have no context: the SRP_I_LOGOUT send in Logout.
	// Zero means 5 s (ib_srp's SRP_ABORT_TIMEOUT_MS for its own waits).
	Timeout time.Duration
}
