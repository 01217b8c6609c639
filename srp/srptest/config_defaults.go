package srptest

import (
	"cmp"
	"fmt"
	"time"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/srp/iu"
)

// What a Config becomes before a login: ib_srp's defaults filled in and checked
// (withDefaults), and the IU lengths and buffer sizes that follow from it, as ib_srp computes
// them.

// withDefaults returns cfg with ib_srp's defaults filled in, or an error for values ib_srp
// would refuse.
func (cfg Config) withDefaults() (Config, error) {
	if !cfg.Addr.IsValid() {
		return cfg, fmt.Errorf("srptest: config: target address %v: %w", cfg.Addr, ErrConfig)
	}
	cfg.ReqBufFmt = cmp.Or(cfg.ReqBufFmt, iu.BufFormatDirect|iu.BufFormatIndirect)
	cfg.MaxImmData = cmp.Or(cfg.MaxImmData, DefaultMaxImmData)
	cfg.ImmDataOffset = cmp.Or(cfg.ImmDataOffset, ImmDataOffset)
	cfg.QueueDepth = cmp.Or(cfg.QueueDepth, DefaultQueueDepth)
	cfg.CmdSGEntries = cmp.Or(cfg.CmdSGEntries, DefaultCmdSGEntries)
	cfg.RNRRetryCount = cmp.Or(cfg.RNRRetryCount, DefaultRNRRetryCount)
	cfg.RetryCount = cmp.Or(cfg.RetryCount, DefaultRetryCount)
	cfg.ResponderResources = cmp.Or(cfg.ResponderResources, DefaultResponderResources)
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	family, space := ib.FamilyIP, memfabric.PortSpaceTCP
	if cfg.LoginForm == LoginFormIBCM {
		family, space = ib.FamilyIB, memfabric.PortSpaceIB
	}
	cfg.Family = cmp.Or(cfg.Family, family)
	cfg.PortSpace = cmp.Or(cfg.PortSpace, space)
	switch {
	case cfg.QueueDepth < 3:
		// can_queue = queue_size - 2 must leave room for one command.
		return cfg, fmt.Errorf("srptest: config: queue depth %d, need at least 3: %w", cfg.QueueDepth, ErrConfig)
	case cfg.CmdSGEntries < 1 || cfg.CmdSGEntries > MaxCmdSGEntries:
		return cfg, fmt.Errorf("srptest: config: cmd_sg_entries %d outside 1..%d: %w", cfg.CmdSGEntries, MaxCmdSGEntries, ErrConfig)
	case cfg.MaxImmData < 0:
		return cfg, fmt.Errorf("srptest: config: max_imm_data %d: %w", cfg.MaxImmData, ErrConfig)
	case cfg.RNRRetryCount > DefaultRNRRetryCount:
		return cfg, fmt.Errorf("srptest: config: RNR retry count %d outside 0..7: %w", cfg.RNRRetryCount, ErrConfig)
	case cfg.RetryCount < 0 || cfg.RetryCount > 7:
		return cfg, fmt.Errorf("srptest: config: retry count %d outside 0..7: %w", cfg.RetryCount, ErrConfig)
	case cfg.LoginForm != LoginFormRDMACM && cfg.LoginForm != LoginFormIBCM:
		return cfg, fmt.Errorf("srptest: config: %v: %w", cfg.LoginForm, ErrConfig)
	case cfg.PortSpace != 0 && cfg.PortSpace != memfabric.PortSpaceTCP && cfg.PortSpace != memfabric.PortSpaceIB:
		return cfg, fmt.Errorf("srptest: config: %v: %w", cfg.PortSpace, ErrConfig)
	case cfg.Family != ib.FamilyIP && cfg.Family != ib.FamilyIB:
		return cfg, fmt.Errorf("srptest: config: %v: %w", cfg.Family, ErrConfig)
	case cfg.MultiChannel&^iu.MultiChanActionMask != 0:
		return cfg, fmt.Errorf("srptest: config: multi-channel action %#x is more than bits 1:0: %w", uint8(cfg.MultiChannel), ErrConfig)
	}
	return cfg, nil
}

func (cfg *Config) immRequested() bool { return cfg.ImmediateData.enabled(true) }

func (cfg *Config) rnrRetry() uint8 {
	if cfg.RNRRetryCount < 0 {
		return 0
	}
	return uint8(cfg.RNRRetryCount)
}

// MaxITIULen is ib_srp's srp_max_it_iu_len: the largest SRP_CMD it can build (48-byte header,
// 16 bytes of additional CDB, a 20-byte indirect descriptor with cmdSGEntries descriptors),
// raised to hold SRP_IMM_DATA_OFFSET + maxImmData bytes when immediate data is used, then capped
// by maxITIUSize (ib_srp's max_it_iu_size) if that is non-zero. With the defaults (12, true,
// 8192, 0) it is 8260.
func MaxITIULen(cmdSGEntries int, immData bool, maxImmData int, maxITIUSize uint32) uint32 {
	n := uint32(iu.CmdMinSize + MaxAddCDBLen + iu.IndirectBufHeaderSize + cmdSGEntries*iu.DirectBufSize)
	if immData {
		n = max(n, uint32(ImmDataOffset+maxImmData))
	}
	if maxITIUSize != 0 {
		n = min(n, maxITIUSize)
	}
	return n
}

// reqITIULen is the REQUESTED MAXIMUM IT IU LENGTH sent at login.
func (cfg *Config) reqITIULen() uint32 {
	if cfg.ITIULen != 0 {
		return cfg.ITIULen
	}
	return MaxITIULen(cfg.CmdSGEntries, cfg.immRequested(), cfg.MaxImmData, 0)
}

// txBufSize is the size of each send buffer: large enough for every IU this configuration can
// build, even when that is more than was requested or granted (tests of the target's length
// checks send such IUs on purpose).
func (cfg *Config) txBufSize() int {
	n := max(int(cfg.reqITIULen()), int(MaxITIULen(cfg.CmdSGEntries, false, 0, 0)), iu.TskMgmtSize)
	if cfg.immRequested() {
		n = max(n, int(cfg.ImmDataOffset)+cfg.MaxImmData)
	}
	return n
}
