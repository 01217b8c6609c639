package scsi

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
)

// RECEIVE COPY RESULTS (SPC-4 6.18) and the THIRD-PARTY COPY VPD page (SPC-4 7.8.17): what the
// copy manager of EXTENDED COPY (xcopy.go) can do, and how far a copy got.

// copyStatusKept bounds the copy operations one logical unit remembers for COPY STATUS: those in
// progress (at most xcopyMaxConcurrent) and the latest completed ones, the oldest dropped first.
const copyStatusKept = 64

// copyKey names a copy operation: the I_T nexus that started it and its LIST IDENTIFIER.
type copyKey struct {
	nexus  *Nexus
	listID byte
}

// copyOp is the progress of one EXTENDED COPY whose status is kept (LIST ID USAGE 00b or 10b).
type copyOp struct {
	key      copyKey
	seq      uint64 // order of creation, for eviction
	done     atomic.Bool
	failed   atomic.Bool
	segments atomic.Uint32 // segment descriptors processed
	bytes    atomic.Uint64 // bytes written to destinations
}

func (op *copyOp) segmentDone()         { op.segments.Add(1) }
func (op *copyOp) transferred(n uint64) { op.bytes.Add(n) }

// copyRegistry is the copy manager state of a logical unit: the copies running and the status
// of those that can still be asked for.
type copyRegistry struct {
	running atomic.Int32 // EXTENDED COPY commands in progress

	mu  sync.Mutex
	ops map[copyKey]*copyOp
	seq uint64
}

// begin registers a copy operation of nexus n with listID, replacing a completed one with the
// same key; nil when one with that key is still in progress (OPERATION IN PROGRESS, SPC-4
// 6.4.3: a LIST IDENTIFIER must be unique among the I_T nexus's copies in progress).
func (r *copyRegistry) begin(n *Nexus, listID byte) *copyOp {
	k := copyKey{n, listID}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.ops[k]; old != nil && !old.done.Load() {
		return nil
	}
	if r.ops == nil {
		r.ops = make(map[copyKey]*copyOp)
	}
	delete(r.ops, k)
	if len(r.ops) >= copyStatusKept {
		var oldest *copyOp
		for _, op := range r.ops {
			if op.done.Load() && (oldest == nil || op.seq < oldest.seq) {
				oldest = op
			}
		}
		if oldest != nil {
			delete(r.ops, oldest.key)
		}
	}
	r.seq++
	op := &copyOp{key: k, seq: r.seq}
	r.ops[k] = op
	return op
}

// finish marks op completed, with or without errors.
func (r *copyRegistry) finish(op *copyOp, failed bool) {
	op.failed.Store(failed)
	op.done.Store(true)
}

// take returns the copy operation of nexus n with listID, or nil. A completed one is forgotten
// once its status has been returned (SPC-4 6.18.3).
func (r *copyRegistry) take(n *Nexus, listID byte) *copyOp {
	k := copyKey{n, listID}
	r.mu.Lock()
	defer r.mu.Unlock()
	op := r.ops[k]
	if op != nil && op.done.Load() {
		delete(r.ops, k)
	}
	return op
}

// COPY MANAGER STATUS values (SPC-4 6.18.3, table 321).
const (
	copyInProgress        = 0x00
	copyCompletedGood     = 0x01
	copyCompletedWithErrs = 0x02
)

// receiveCopyStatus handles RECEIVE COPY RESULTS with COPY STATUS (SPC-4 6.18.3): the status of
// the EXTENDED COPY of this I_T nexus with the CDB's LIST IDENTIFIER, in progress or completed.
// A LIST IDENTIFIER that names no copy the copy manager remembers is INVALID FIELD IN CDB on
// it. The TRANSFER COUNT is in bytes (TRANSFER COUNT UNITS 00h); HDD is 0: no data is held.
func receiveCopyStatus(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageCopyStatus)) {
		return
	}
	alloc := int(binary.BigEndian.Uint32(c.CDB[10:]))
	op := lu.copies.take(c.Nexus, c.CDB[2])
	if op == nil {
		c.invalidCDBField(2, -1)
		return
	}
	var buf [12]byte
	binary.BigEndian.PutUint32(buf[0:], 8) // AVAILABLE DATA
	switch {
	case !op.done.Load():
		buf[4] = copyInProgress
	case op.failed.Load():
		buf[4] = copyCompletedWithErrs
	default:
		buf[4] = copyCompletedGood
	}
	binary.BigEndian.PutUint16(buf[5:], uint16(op.segments.Load()))
	buf[7] = 0x00 // TRANSFER COUNT UNITS: bytes
	binary.BigEndian.PutUint32(buf[8:], uint32(min(op.bytes.Load(), 0xFFFFFFFF)))
	c.putDataIn(buf[:], alloc)
}

// copyDescriptorCodes are the descriptor type codes the copy manager implements: block device
// to block device segments and identification descriptor CSCDs.
var copyDescriptorCodes = [...]byte{segBlockToBlock, cscdIdentifier}

// receiveCopyOperatingParams handles RECEIVE COPY RESULTS with OPERATING PARAMETERS (SPC-4
// 6.18.4): the limits decodeCopyList enforces. SNLID is 1 (LIST ID USAGE 11b is accepted); no
// inline, embedded or held data; DATA SEGMENT GRANULARITY is the logical block (sg_xcopy
// copies no fewer bytes than it).
func receiveCopyOperatingParams(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageCopyOpParams)) {
		return
	}
	alloc := int(binary.BigEndian.Uint32(c.CDB[10:]))
	var buf [44 + len(copyDescriptorCodes)]byte
	binary.BigEndian.PutUint32(buf[0:], uint32(len(buf)-4)) // AVAILABLE DATA
	buf[4] = 0x01                                           // SNLID
	binary.BigEndian.PutUint16(buf[8:], xcopyMaxCSCDs)
	binary.BigEndian.PutUint16(buf[10:], xcopyMaxSegments)
	binary.BigEndian.PutUint32(buf[12:], xcopyMaxListLength)
	binary.BigEndian.PutUint32(buf[16:], xcopyMaxSegmentBytes)
	// 20..23 MAXIMUM INLINE DATA LENGTH, 24..27 HELD DATA LIMIT, 28..31 MAXIMUM STREAM DEVICE
	// TRANSFER SIZE: 0.
	binary.BigEndian.PutUint16(buf[34:], xcopyMaxConcurrent) // TOTAL CONCURRENT COPIES
	buf[36] = xcopyMaxConcurrent                             // MAXIMUM CONCURRENT COPIES
	buf[37] = byte(lu.blockShift)                            // DATA SEGMENT GRANULARITY (log2 bytes)
	// 38 INLINE DATA GRANULARITY, 39 HELD DATA GRANULARITY: 2^0.
	buf[43] = byte(len(copyDescriptorCodes)) // IMPLEMENTED DESCRIPTOR LIST LENGTH
	copy(buf[44:], copyDescriptorCodes[:])
	c.putDataIn(buf[:], alloc)
}

// Third-party copy descriptor types of the THIRD-PARTY COPY VPD page (SPC-4 7.8.17, table 624).
const (
	tpcSupportedCommands    = 0x0001
	tpcParameterData        = 0x0004
	tpcSupportedDescriptors = 0x0008
	tpcSupportedCSCDIDs     = 0x000C
	tpcGeneralCopyOps       = 0x8001
)

// vpdThirdPartyCopy writes the THIRD-PARTY COPY VPD page (SPC-4 7.8.17) after the 4-byte header
// in buf and returns its length: the descriptors SPC-4 requires of a copy manager that supports
// EXTENDED COPY (LID1), each padded to a multiple of four bytes:
//   - Supported Commands: EXTENDED COPY (83h) with LID1 (00h), RECEIVE COPY RESULTS (84h)
//     with COPY STATUS (00h) and OPERATING PARAMETERS (03h);
//   - Parameter Data: the descriptor counts and list length of OPERATING PARAMETERS;
//   - Supported Descriptors: 02h and E4h;
//   - Supported CSCD Descriptor IDs: none beyond the indexes of the parameter list;
//   - General Copy Operations: the concurrency, MAXIMUM SEGMENT LENGTH and DATA SEGMENT
//     GRANULARITY (in logical blocks here: 2^0).
func vpdThirdPartyCopy(buf []byte) int {
	off := 4
	put := func(typ uint16, body []byte) {
		d := buf[off:]
		n := (len(body) + 3) &^ 3
		binary.BigEndian.PutUint16(d[0:], typ)
		binary.BigEndian.PutUint16(d[2:], uint16(n))
		copy(d[4:], body)
		off += 4 + n
	}
	cmds := []byte{opThirdPartyCopyOut, 1, saExtendedCopyLID1, opThirdPartyCopyIn, 2, saCopyStatus, saOperatingParams}
	put(tpcSupportedCommands, append([]byte{byte(len(cmds))}, cmds...))

	var params [28]byte
	binary.BigEndian.PutUint16(params[4:], xcopyMaxCSCDs)
	binary.BigEndian.PutUint16(params[6:], xcopyMaxSegments)
	binary.BigEndian.PutUint32(params[8:], xcopyMaxListLength)
	// 12..15 MAXIMUM INLINE DATA LENGTH 0
	put(tpcParameterData, params[:])

	put(tpcSupportedDescriptors, append([]byte{byte(len(copyDescriptorCodes))}, copyDescriptorCodes[:]...))
	put(tpcSupportedCSCDIDs, []byte{0, 0})

	var general [32]byte
	binary.BigEndian.PutUint32(general[0:], xcopyMaxConcurrent) // TOTAL CONCURRENT COPIES
	binary.BigEndian.PutUint32(general[4:], xcopyMaxConcurrent) // MAXIMUM IDENTIFIED CONCURRENT COPIES
	binary.BigEndian.PutUint32(general[8:], xcopyMaxSegmentBytes)
	put(tpcGeneralCopyOps, general[:])
	return off - 4
}
