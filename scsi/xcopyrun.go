package scsi

import (
	"bytes"
	"encoding/binary"
	"time"
)

// copyTargetFinder finds the logical unit a CSCD descriptor's designator names, among those an
// EXTENDED COPY may read or write: writeProtected is what the initiator may not change. The
// LUN map the command came through implements it with the logical units that initiator sees,
// so that a copy cannot reach a logical unit its ACL hides (the hole LIO closed as
// CVE-2020-28374, target_xcopy_locate_se_dev_e4 in drivers/target/target_core_xcopy.c).
type copyTargetFinder interface {
	findCopyTarget(designator []byte) (lu *LogicalUnit, writeProtected bool, ok bool)
}

// findCopyTarget implements copyTargetFinder over the map's logical units.
func (m *LUNMap) findCopyTarget(designator []byte) (*LogicalUnit, bool, bool) {
	for i := range m.mappings {
		mp := &m.mappings[i]
		if bytes.Equal(designator, mp.LU.naaDescriptor[:]) {
			return mp.LU, mp.WriteProtected(), true
		}
	}
	return nil, false, false
}

// selfTarget is the copyTargetFinder of a command that came through no LUN map: the logical
// unit itself is the only copy target.
type selfTarget struct {
	lu       *LogicalUnit
	readOnly bool
}

func (s selfTarget) findCopyTarget(designator []byte) (*LogicalUnit, bool, bool) {
	if bytes.Equal(designator, s.lu.naaDescriptor[:]) {
		return s.lu, s.readOnly || s.lu.cfg.ReadOnly || s.lu.bs.ReadOnly(), true
	}
	return nil, false, false
}

// xcopyTimeLimit bounds the time one EXTENDED COPY spends copying: a backstore that slows to a
// crawl ends the copy with COPY ABORTED (LOGICAL UNIT COMMUNICATION TIME-OUT) rather than
// holding the command for as long as it takes. The initiator retries from COPY STATUS's count.
var xcopyTimeLimit = 60 * time.Second

// copyFailure is why a copy stopped after the parameter list was accepted: COPY ABORTED (or
// RESERVATION CONFLICT) with the segment number in the COMMAND-SPECIFIC INFORMATION field.
type copyFailure struct {
	reason   Reason
	info     SenseInfo
	conflict bool // RESERVATION CONFLICT status instead of CHECK CONDITION
}

// segmentFailure is reason for segment seg. With ptr >= 0 the sense key specific bytes point at
// byte ptr of the segment descriptor (sd) or of the parameter list.
func segmentFailure(reason Reason, seg int, sd bool, ptr int) *copyFailure {
	f := &copyFailure{reason: reason, info: SenseInfo{CommandSpecific: uint32(seg), CommandSpecificValid: true}}
	if ptr >= 0 {
		f.info.FieldPointerValid, f.info.SegmentDescriptor, f.info.FieldPointer = true, sd, uint16(ptr)
	}
	if reason.Key() != SenseCopyAborted {
		f.info.CopyAborted = true
	}
	return f
}

// copyReadAccess and copyWriteAccess are how the copy reaches its source and its destination
// under their reservations: as READ and WRITE from the I_T nexus of the EXTENDED COPY.
var (
	copyReadAccess  = opInfo{name: "EXTENDED COPY source", flags: opPRReads}
	copyWriteAccess = opInfo{name: "EXTENDED COPY destination", flags: opWritesMedium}
)

// copyTarget is a resolved CSCD descriptor.
type copyTarget struct {
	lu             *LogicalUnit
	writeProtected bool
}

// copyPlan is one segment ready to run: source and destination, in logical blocks of each.
type copyPlan struct {
	src, dst       *LogicalUnit
	srcLBA, dstLBA uint64
	bytes          uint64
}

// extendedCopy handles EXTENDED COPY (LID1) (SPC-4 6.4). A PARAMETER LIST LENGTH of zero copies
// nothing; one shorter than the header is PARAMETER LIST LENGTH ERROR; a data-out buffer
// shorter than the PARAMETER LIST LENGTH is INVALID FIELD IN CDB on that field. The list is
// decoded and every segment resolved and checked (planCopy) before any block moves; then the
// segments run in order, each in chunks of a scratch buffer, backstore to backstore.
func extendedCopy(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageExtendedCopy)) {
		return
	}
	paramLen := uint64(binary.BigEndian.Uint32(c.CDB[10:]))
	c.TransferLength = clampInt(paramLen)
	switch {
	case paramLen == 0:
		return
	case paramLen < xcopyHeaderLength:
		c.fail(ReasonParameterListLengthError)
		return
	case uint64(len(c.DataOut)) < paramLen:
		c.invalidCDBField(10, -1)
		return
	}
	list, f := decodeCopyList(c.DataOut[:paramLen])
	if c.failOn(f) {
		return
	}
	if lu.copies.running.Add(1) > xcopyMaxConcurrent {
		lu.copies.running.Add(-1)
		c.fail(ReasonInsufficientResources)
		return
	}
	defer lu.copies.running.Add(-1)
	var op *copyOp
	if list.idUsage != listIDNone {
		if op = lu.copies.begin(c.Nexus, list.listID); op == nil {
			c.fail(ReasonOperationInProgress)
			return
		}
	}
	failure := lu.runCopy(c, &list, op)
	if op != nil {
		lu.copies.finish(op, failure != nil || c.aborted.Load())
	}
	switch {
	case failure == nil:
	case failure.conflict:
		c.reservationConflict()
	default:
		c.failInfo(failure.reason, failure.info)
	}
}

// runCopy plans and runs the segments of list, counting progress in op (nil: not kept).
func (lu *LogicalUnit) runCopy(c *Command, list *copyList, op *copyOp) *copyFailure {
	var finder copyTargetFinder = selfTarget{lu: lu, readOnly: c.readOnly}
	if c.lunMap != nil {
		finder = c.lunMap
	}
	var plans [xcopyMaxSegments]copyPlan
	var held [xcopyMaxCSCDs]*LogicalUnit
	defer func() {
		for _, h := range held {
			if h != nil {
				h.Release()
			}
		}
	}()
	if fail := lu.planCopy(c, list, finder, plans[:len(list.segs)], &held); fail != nil {
		return fail
	}
	deadline := time.Now().Add(xcopyTimeLimit)
	scratch := getScratch()
	defer putScratch(scratch)
	for i := range list.segs {
		if fail := copySegmentData(c, &plans[i], i, scratch[:], deadline, op); fail != nil {
			return fail
		}
		if c.aborted.Load() {
			return nil
		}
		if op != nil {
			op.segmentDone()
		}
	}
	return nil
}

// planCopy resolves and checks every segment of list before anything is copied:
//   - a CSCD DESCRIPTOR ID past the CSCD descriptors, or a designator that names no logical unit
//     the initiator sees, is COPY ABORTED, COPY TARGET DEVICE NOT REACHABLE;
//   - a copy target that is being sanitized, or whose sanitize failed, is COPY ABORTED with
//     the additional sense code its own commands get (SANITIZE IN PROGRESS, SANITIZE COMMAND
//     FAILED);
//   - a DISK BLOCK LENGTH other than the logical unit's block size is INVALID FIELD IN
//     PARAMETER LIST on it;
//   - a segment whose bytes are not whole blocks of both its source and its destination is
//     COPY ABORTED, UNEXPECTED INEXACT SEGMENT; more than MAXIMUM SEGMENT LENGTH bytes is
//     INVALID FIELD IN PARAMETER LIST on the NUMBER OF BLOCKS;
//   - blocks outside the source's or the destination's medium are COPY ABORTED with the segment
//     pointer on the LOGICAL BLOCK ADDRESS (no additional sense code: SPC-4 has the copy
//     manager forward the copy target's sense data, and a copy target it reaches without
//     commands has none to forward);
//   - a destination write-protected for the initiator is COPY ABORTED, WRITE PROTECTED;
//   - a copy target whose reservations refuse the initiator a read (source) or a write
//     (destination) ends the command in RESERVATION CONFLICT, as a READ or WRITE would.
//
// The copy targets are held (LogicalUnit.Hold) until the copy ends, so that a reload cannot
// close a backstore under it; the caller releases held.
func (lu *LogicalUnit) planCopy(c *Command, list *copyList, finder copyTargetFinder, plans []copyPlan, held *[xcopyMaxCSCDs]*LogicalUnit) *copyFailure {
	var targets [xcopyMaxCSCDs]copyTarget
	resolve := func(seg int, id uint16, idOff int) (*copyTarget, *copyFailure) {
		if int(id) >= len(list.cscds) {
			return nil, segmentFailure(ReasonCopyTargetDeviceNotReachable, seg, true, idOff)
		}
		t := &targets[id]
		if t.lu != nil {
			return t, nil
		}
		d := &list.cscds[id]
		target, wp, ok := finder.findCopyTarget(d.designator)
		if !ok || !target.Hold() {
			return nil, segmentFailure(ReasonCopyTargetDeviceNotReachable, seg, false, d.off+4)
		}
		held[id] = target
		if r, _ := target.sanitizeBlocked(); r != ReasonNone {
			// A copy target being sanitized (or failed to be) is not ready for anyone.
			return nil, segmentFailure(r, seg, false, d.off+4)
		}
		if d.blockSize != target.blockSize {
			return nil, &copyFailure{reason: ReasonInvalidFieldInParameterList,
				info: SenseInfo{FieldPointerValid: true, FieldPointer: uint16(d.off + 29)}}
		}
		*t = copyTarget{lu: target, writeProtected: wp}
		return t, nil
	}
	for i := range list.segs {
		s := &list.segs[i]
		src, fail := resolve(i, s.src, 4)
		if fail != nil {
			return fail
		}
		dst, fail := resolve(i, s.dst, 6)
		if fail != nil {
			return fail
		}
		unit := uint64(src.lu.blockSize)
		if s.dc {
			unit = uint64(dst.lu.blockSize)
		}
		n := uint64(s.blocks) * unit
		if n%uint64(src.lu.blockSize) != 0 || n%uint64(dst.lu.blockSize) != 0 {
			return segmentFailure(ReasonUnexpectedInexactSegment, i, true, 10)
		}
		if n > xcopyMaxSegmentBytes {
			return &copyFailure{reason: ReasonInvalidFieldInParameterList,
				info: SenseInfo{FieldPointerValid: true, FieldPointer: uint16(s.off + 10)}}
		}
		if n > 0 && !src.lu.lbaInRange(s.srcLBA, n>>src.lu.blockShift) {
			return segmentFailure(ReasonCopyAborted, i, true, 12)
		}
		if n > 0 && !dst.lu.lbaInRange(s.dstLBA, n>>dst.lu.blockShift) {
			return segmentFailure(ReasonCopyAborted, i, true, 20)
		}
		if dst.writeProtected {
			return segmentFailure(ReasonWriteProtected, i, false, -1)
		}
		if st := src.lu.pr.state.Load(); st.active && st.conflicts(c.Nexus.id(), &copyReadAccess, nil) {
			return &copyFailure{conflict: true}
		}
		if st := dst.lu.pr.state.Load(); st.active && st.conflicts(c.Nexus.id(), &copyWriteAccess, nil) {
			return &copyFailure{conflict: true}
		}
		plans[i] = copyPlan{src: src.lu, dst: dst.lu, srcLBA: s.srcLBA, dstLBA: s.dstLBA, bytes: n}
	}
	return nil
}

// copySegmentData copies one planned segment through buf. Overlapping ranges of one logical
// unit with the destination after the source are copied from the end, so that every block is
// read before it is overwritten. The destination's chunks are written under its range lock
// (COMPARE AND WRITE stays atomic) and with FUA when its write cache is off. The copy stops at
// the next chunk when the command is aborted, and with COPY ABORTED when it runs past
// deadline.
func copySegmentData(c *Command, p *copyPlan, seg int, buf []byte, deadline time.Time, op *copyOp) *copyFailure {
	if p.bytes == 0 {
		return nil
	}
	srcOff, dstOff := p.src.byteOffset(p.srcLBA), p.dst.byteOffset(p.dstLBA)
	chunk := uint64(len(buf))
	backwards := p.src == p.dst && dstOff > srcOff && uint64(dstOff-srcOff) < p.bytes
	fua := p.dst.writeFUA(false)
	for done := uint64(0); done < p.bytes; {
		if c.aborted.Load() {
			return nil
		}
		if time.Now().After(deadline) {
			return segmentFailure(ReasonLogicalUnitCommunicationTimeout, seg, false, -1)
		}
		k := min(chunk, p.bytes-done)
		pos := done
		if backwards {
			pos = p.bytes - done - k
		}
		b := buf[:k]
		if err := p.src.bs.ReadAt(b, srcOff+int64(pos)); err != nil {
			f := segmentFailure(reasonForIOError(err, true), seg, false, -1)
			f.info.Information, f.info.InformationValid = p.srcLBA+pos>>p.src.blockShift, true
			return f
		}
		if c.aborted.Load() {
			return nil // aborted while reading: nothing more reaches the destination
		}
		lba := p.dstLBA + pos>>p.dst.blockShift
		slot := p.dst.ranges.lock(lba, k>>p.dst.blockShift, false)
		err := p.dst.bs.WriteAt(b, dstOff+int64(pos), fua)
		p.dst.ranges.unlock(slot)
		if err != nil {
			f := segmentFailure(reasonForIOError(err, false), seg, false, -1)
			f.info.Information, f.info.InformationValid = lba, true
			return f
		}
		done += k
		if op != nil {
			op.transferred(k)
		}
	}
	return nil
}
