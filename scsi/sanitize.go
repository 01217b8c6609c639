package scsi

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"
)

// SANITIZE (SBC-4 5.30, the sanitize operation 4.32): OVERWRITE writes an initialization
// pattern over every block, BLOCK ERASE deallocates every block (writing zeroes first where
// deallocated blocks would not read as zeroes), so that no data written before can be read
// again. The operation runs on a goroutine of its own: it is not a task, task management
// does not stop it (SBC-4 4.32.2), and while it runs every command but INQUIRY, REPORT LUNS
// and REQUEST SENSE ends in NOT READY, SANITIZE IN PROGRESS with its progress, which REQUEST
// SENSE reports too. A sanitize that fails leaves the logical unit in the sanitize failure
// mode: those commands end in MEDIUM ERROR, SANITIZE COMMAND FAILED until a SANITIZE succeeds,
// or, when the failed one had AUSE set, until SANITIZE EXIT FAILURE MODE. SBC-4 has SANITIZE
// processed as a HEAD OF QUEUE command; here it takes its place in the task set as any command,
// and its operation waits for the writes already running (runSanitize).

const opSanitize = 0x48

// SANITIZE service actions (SBC-4 table 103). CRYPTOGRAPHIC ERASE is not supported: the data
// is not stored encrypted.
const (
	saSanitizeOverwrite   = 0x01
	saSanitizeBlockErase  = 0x02
	saSanitizeExitFailure = 0x1F
)

// Byte 1 of the SANITIZE CDB: IMMED, ZNR (zoned devices only: refused), AUSE.
const (
	sanitizeImmed = 0x80
	sanitizeAUSE  = 0x20
)

// usageSanitize: IMMED and AUSE and the service action; bytes 2-6 reserved; PARAMETER LIST
// LENGTH. EXIT FAILURE MODE evaluates the same fields (it refuses any parameter list).
var usageSanitize = []byte{opSanitize, 0xBF, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0x07}

// sanitizeCommands: OVERWRITE and BLOCK ERASE may wait for their operation (without IMMED), so
// they never run on a goroutine that must not block (opMayBlock).
var sanitizeCommands = []opInfo{
	{name: "SANITIZE OVERWRITE", opcode: opSanitize, serviceAction: saSanitizeOverwrite, hasSA: true,
		cdbLength: 10, usage: usageSanitize, flags: opWritesMedium | opMayBlock, run: sanitize},
	{name: "SANITIZE BLOCK ERASE", opcode: opSanitize, serviceAction: saSanitizeBlockErase, hasSA: true,
		cdbLength: 10, usage: usageSanitize, flags: opWritesMedium | opMayBlock, run: sanitize},
	{name: "SANITIZE EXIT FAILURE MODE", opcode: opSanitize, serviceAction: saSanitizeExitFailure, hasSA: true,
		cdbLength: 10, usage: usageSanitize, flags: opWritesMedium, run: sanitize},
}

// sanitizeOp is a sanitize operation in progress.
type sanitizeOp struct {
	progress atomic.Uint32 // 0..65536
	done     chan struct{}
	failed   bool // set before done is closed
}

// sanitizeState is what a logical unit knows of its sanitize operation.
type sanitizeState struct {
	running atomic.Pointer[sanitizeOp] // nil unless one runs
	// failure is the sanitize failure mode: 0 (none), failedRestricted or failedUnrestricted.
	failure atomic.Int32
}

// Sanitize failure modes (SBC-4 4.32.3, "completing a sanitize operation"): after a failure in the
// restricted completion mode (AUSE 0) only a sanitize that succeeds clears it, and a SANITIZE
// with AUSE set or EXIT FAILURE MODE is INVALID FIELD IN CDB; in the unrestricted one (AUSE 1)
// EXIT FAILURE MODE clears it too.
const (
	failedRestricted   = 1
	failedUnrestricted = 2
)

// sanitizePollInterval is how often a SANITIZE without IMMED looks whether it was aborted while
// it waits for its operation to end.
const sanitizePollInterval = 20 * time.Millisecond

// sanitizeBlocked reports the reason a command other than INQUIRY, REPORT LUNS and REQUEST
// SENSE ends with while a sanitize runs or failed, and its progress; ReasonNone otherwise.
func (lu *LogicalUnit) sanitizeBlocked() (Reason, SenseInfo) {
	if op := lu.sanitizing.running.Load(); op != nil {
		return ReasonSanitizeInProgress, op.progressInfo()
	}
	if lu.sanitizing.failure.Load() != 0 {
		return ReasonSanitizeCommandFailed, SenseInfo{}
	}
	return ReasonNone, SenseInfo{}
}

// progressInfo is the PROGRESS INDICATION of op (SPC-4 4.5.2.4.4).
func (op *sanitizeOp) progressInfo() SenseInfo {
	return SenseInfo{ProgressValid: true, Progress: uint16(min(op.progress.Load(), 0xFFFF))}
}

// supportsBlockErase reports whether SANITIZE BLOCK ERASE is offered: it deallocates, so it
// needs logical block provisioning (and libiscsi checks LBPME for it).
func (lu *LogicalUnit) supportsBlockErase() bool { return lu.supportsUnmap() }

// sanitize handles SANITIZE (SBC-4 5.30). Checks, in order: the reserved fields; OVERWRITE's
// parameter list (below), BLOCK ERASE's and EXIT FAILURE MODE's PARAMETER LIST LENGTH must be
// zero (INVALID FIELD IN CDB on it); BLOCK ERASE needs thin provisioning (else it is an
// unsupported service action). EXIT FAILURE MODE after a failure in the restricted completion
// mode is INVALID FIELD IN CDB on the service action, and so is AUSE on the AUSE bit; without a
// failure it has nothing to do.
//
// OVERWRITE's parameter list (SBC-4 5.30.3): a PARAMETER LIST LENGTH from 5 to the block size
// plus 4 (else INVALID FIELD IN CDB on it); INVERT (byte 0 bit 7), TEST (bits 6:5, must be 00b:
// there is no test mode), OVERWRITE COUNT (bits 4:0, 1 to 31 passes), byte 1 reserved, then the
// INITIALIZATION PATTERN LENGTH (1 to the block size, and the rest of the list) and the pattern,
// repeated to fill each block; INVALID FIELD IN PARAMETER LIST otherwise. With INVERT the
// passes alternate the pattern and its inverse, ending with the pattern itself.
func sanitize(lu *LogicalUnit, c *Command) {
	cdb := c.CDB
	if c.failOn(checkCDBUsage(cdb, usageSanitize)) {
		return
	}
	if cdb[1]&0x40 != 0 { // ZNR
		c.invalidCDBField(1, 6)
		return
	}
	sa := cdb[1] & 0x1F
	paramLen := int(binary.BigEndian.Uint16(cdb[7:]))
	c.TransferLength = paramLen
	var block []byte
	var passes int
	var invert bool
	switch sa {
	case saSanitizeOverwrite:
		if paramLen < 5 || paramLen > int(lu.blockSize)+4 {
			c.invalidCDBField(7, -1)
			return
		}
		if len(c.DataOut) < paramLen {
			c.fail(ReasonInvalidFieldInCommandIU)
			return
		}
		p := c.DataOut[:paramLen]
		patLen := int(binary.BigEndian.Uint16(p[2:]))
		switch {
		case p[0]&0x60 != 0:
			c.invalidParamField(0, 6)
			return
		case p[0]&0x1F == 0:
			c.invalidParamField(0, 4)
			return
		case p[1] != 0:
			c.invalidParamField(1, -1)
			return
		case patLen == 0 || patLen > int(lu.blockSize) || patLen != paramLen-4:
			c.invalidParamField(2, -1)
			return
		}
		invert, passes = p[0]&0x80 != 0, int(p[0]&0x1F)
		block = make([]byte, lu.blockSize)
		for i := 0; i < len(block); i += patLen {
			copy(block[i:], p[4:])
		}
	case saSanitizeBlockErase, saSanitizeExitFailure:
		if paramLen != 0 {
			c.invalidCDBField(7, -1)
			return
		}
		if sa == saSanitizeBlockErase && !lu.supportsBlockErase() {
			c.invalidServiceAction()
			return
		}
	}
	switch failure := lu.sanitizing.failure.Load(); {
	case sa == saSanitizeExitFailure && failure == failedRestricted:
		c.invalidServiceAction()
		return
	case sa == saSanitizeExitFailure:
		lu.sanitizing.failure.CompareAndSwap(failure, 0)
		return
	case failure == failedRestricted && cdb[1]&sanitizeAUSE != 0:
		c.invalidCDBField(1, 5)
		return
	}

	op := &sanitizeOp{done: make(chan struct{})}
	if !lu.sanitizing.running.CompareAndSwap(nil, op) {
		c.failInfo(lu.sanitizeBlocked())
		return
	}
	ause := cdb[1]&sanitizeAUSE != 0
	if !lu.Hold() {
		lu.sanitizing.running.Store(nil)
		c.fail(ReasonLogicalUnitCommunicationFailure)
		return
	}
	go lu.runSanitize(op, block, passes, invert, ause)
	if cdb[1]&sanitizeImmed != 0 {
		return
	}
	for {
		select {
		case <-op.done:
			if op.failed {
				c.fail(ReasonSanitizeCommandFailed)
			}
			return
		case <-time.After(sanitizePollInterval):
			if c.aborted.Load() {
				return // the operation goes on (SBC-4 4.32.2)
			}
		}
	}
}

// runSanitize does the sanitize operation: OVERWRITE when block is not nil, else BLOCK ERASE.
// It first takes the whole medium exclusive in the range lock, so that writes that began
// before the SANITIZE end before it starts (new ones are refused meanwhile).
func (lu *LogicalUnit) runSanitize(op *sanitizeOp, block []byte, passes int, invert, ause bool) {
	defer lu.Release()
	blocks := lu.Blocks()
	slot := lu.ranges.lock(0, blocks, true)
	var err error
	if block != nil {
		err = lu.sanitizeOverwrite(op, block, passes, invert, blocks)
	} else {
		err = lu.sanitizeBlockErase(op, blocks)
	}
	if err == nil && !lu.writeCacheEnabled() {
		err = lu.bs.Flush()
	}
	lu.ranges.unlock(slot)
	switch {
	case err == nil:
		lu.sanitizing.failure.Store(0)
	case ause:
		lu.sanitizing.failure.Store(failedUnrestricted)
	default:
		lu.sanitizing.failure.Store(failedRestricted)
	}
	op.failed = err != nil
	op.progress.Store(1 << 16)
	lu.sanitizing.running.Store(nil)
	close(op.done)
}

// errRetired stops a sanitize whose logical unit a reload retired: a logical unit that replaces
// it may serve the same backstore meanwhile, and must not see its writes overwritten.
var errRetired = errors.New("logical unit retired during the sanitize")

// progressOf is done out of total in 65536ths.
func progressOf(done, total uint64) uint32 {
	return uint32(float64(done) / float64(total) * (1 << 16))
}

// sanitizeOverwrite writes block over every one of the first blocks blocks, passes times.
func (lu *LogicalUnit) sanitizeOverwrite(op *sanitizeOp, block []byte, passes int, invert bool, blocks uint64) error {
	scratch := getScratch()
	defer putScratch(scratch)
	bs := uint64(lu.blockSize)
	chunk := min(blocks, uint64(scratchSize)>>lu.blockShift)
	buf := scratch[:chunk*bs]
	total := uint64(passes) * blocks
	for pass := 0; pass < passes; pass++ {
		inverted := invert && (passes-1-pass)%2 == 1
		for i := uint64(0); i < chunk; i++ {
			copy(buf[i*bs:], block)
		}
		if inverted {
			for i := range buf {
				buf[i] = ^buf[i]
			}
		}
		for done := uint64(0); done < blocks; {
			if lu.retiring.Load() {
				return errRetired
			}
			k := min(blocks-done, chunk)
			if err := lu.bs.WriteAt(buf[:k*bs], lu.byteOffset(done), false); err != nil {
				return err
			}
			done += k
			op.progress.Store(progressOf(uint64(pass)*blocks+done, total))
		}
	}
	return nil
}

// sanitizeBlockErase deallocates every block, writing zeroes over them first where the
// backstore's deallocated blocks would not read as zeroes, in pieces of the backstore's
// zeroing bound.
func (lu *LogicalUnit) sanitizeBlockErase(op *sanitizeOp, blocks uint64) error {
	zeroFirst := !lu.bs.Capabilities().UnmapZeroes
	piece := lu.zeroingLimitBlocks()
	for done := uint64(0); done < blocks; {
		if lu.retiring.Load() {
			return errRetired
		}
		k := min(blocks-done, piece)
		if zeroFirst {
			if _, err := lu.zeroBlocks(done, k, false); err != nil {
				return err
			}
		}
		if _, err := lu.zeroBlocks(done, k, true); err != nil {
			return err
		}
		done += k
		op.progress.Store(progressOf(done, blocks))
	}
	return nil
}
