package scsi

import (
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/faultstore"
	"github.com/srptarget/srptarget/internal/testutil/gatestore"
)

// xcopyCDB is EXTENDED COPY (LID1) with a PARAMETER LIST LENGTH of n.
func xcopyCDB(n uint32) []byte {
	cdb := make([]byte, 16)
	cdb[0], cdb[1] = 0x83, 0x00
	binary.BigEndian.PutUint32(cdb[10:], n)
	return cdb
}

// copyResultsCDB is RECEIVE COPY RESULTS with service action sa, LIST IDENTIFIER id and an
// ALLOCATION LENGTH of alloc.
func copyResultsCDB(sa, id byte, alloc uint32) []byte {
	cdb := make([]byte, 16)
	cdb[0], cdb[1], cdb[2] = 0x84, sa, id
	binary.BigEndian.PutUint32(cdb[10:], alloc)
	return cdb
}

// identCSCD is an identification descriptor CSCD descriptor (E4h) naming lu by its NAA
// designator, for a block device of lu's block size.
func identCSCD(lu *LogicalUnit) []byte {
	d := make([]byte, 32)
	d[0] = 0xE4
	copy(d[4:], lu.naaDescriptor[:])
	d[29], d[30], d[31] = byte(lu.blockSize>>16), byte(lu.blockSize>>8), byte(lu.blockSize)
	return d
}

// b2bSegment is a block device to block device segment descriptor (02h).
func b2bSegment(src, dst uint16, blocks uint16, srcLBA, dstLBA uint64) []byte {
	d := make([]byte, 28)
	d[0] = 0x02
	binary.BigEndian.PutUint16(d[2:], 0x18)
	binary.BigEndian.PutUint16(d[4:], src)
	binary.BigEndian.PutUint16(d[6:], dst)
	binary.BigEndian.PutUint16(d[10:], blocks)
	binary.BigEndian.PutUint64(d[12:], srcLBA)
	binary.BigEndian.PutUint64(d[20:], dstLBA)
	return d
}

// xcopyList is an EXTENDED COPY (LID1) parameter list: the header with LIST IDENTIFIER id and
// LIST ID USAGE usage, then the CSCD and segment descriptors.
func xcopyList(id, usage byte, cscds [][]byte, segs [][]byte) []byte {
	c, s := cat(cscds...), cat(segs...)
	h := make([]byte, 16)
	h[0], h[1] = id, usage<<3
	binary.BigEndian.PutUint16(h[2:], uint16(len(c)))
	binary.BigEndian.PutUint32(h[8:], uint32(len(s)))
	return cat(h, c, s)
}

// sendXCopy sends EXTENDED COPY with list from nexus n to LUN lun of m.
func sendXCopy(m *LUNMap, n *Nexus, lun uint16, list []byte) *Command {
	return run(m, n, lun, xcopyCDB(uint32(len(list))), list, 0)
}

// copyPair makes two memory logical units of blocks 512-byte blocks (serials …01 and …02) at
// LUNs 0 and 1 of one map, each filled with its own pattern.
func copyPair(t *testing.T, blocks int64) (m *LUNMap, a, b *LogicalUnit, ma, mb *backstore.Memory) {
	t.Helper()
	mk := func(serial string, seed int) (*LogicalUnit, *backstore.Memory) {
		mem, err := backstore.NewMemory(blocks*512, 512)
		require.NoError(t, err)
		require.NoError(t, mem.WriteAt(testutil.Pattern(int(blocks)*512, seed), 0, false))
		lu, err := NewLogicalUnit(Config{Backstore: mem, Serial: serial, WriteCache: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = lu.Close() })
		return lu, mem
	}
	a, ma = mk("c0b1e5000001", 1)
	b, mb = mk("c0b1e5000002", 2)
	m, err := NewLUNMap([]Mapping{{LUN: 0, LU: a}, {LUN: 1, LU: b}})
	require.NoError(t, err)
	for _, n := range []*Nexus{testNexus, otherNexus} {
		for _, lun := range []uint16{0, 1} {
			c := run(m, n, lun, make([]byte, 6), nil, 0)
			require.Equal(t, StatusCheckCondition, c.Status) // POWER ON
		}
	}
	return m, a, b, ma, mb
}

// copyAbortedWant is the fixed-format sense data of a COPY ABORTED (SPC-4 6.4.4): the additional
// sense code, the segment number in COMMAND-SPECIFIC INFORMATION (bytes 8-11), and the segment
// pointer (bytes 15-17: SKSV, SD, FIELD POINTER) when fp >= 0.
type copyAbortedWant struct {
	asc, ascq byte
	seg       uint32
	sd        bool
	fp        int
}

func checkCopyAborted(t testing.TB, c *Command, w copyAbortedWant) {
	t.Helper()
	require.Equal(t, StatusCheckCondition, c.Status)
	s := c.SenseData()
	require.Len(t, s, 18, "sense % x", s)
	require.Equal(t, []byte{0x0A, w.asc, w.ascq}, []byte{s[2] & 0x0F, s[12], s[13]}, "COPY ABORTED, ASC, ASCQ (sense % x)", s)
	require.Equal(t, w.seg, binary.BigEndian.Uint32(s[8:12]), "COMMAND-SPECIFIC INFORMATION: the segment")
	if w.fp < 0 {
		require.Zero(t, s[15]&0x80, "SKSV")
		return
	}
	sks := byte(0x80)
	if w.sd {
		sks |= 0x20
	}
	require.Equal(t, []byte{sks, byte(w.fp >> 8), byte(w.fp)}, s[15:18], "segment pointer (sense % x)", s)
}

// TestExtendedCopyBetweenLUNs copies with EXTENDED COPY (LID1) between two logical units of one
// LUN map and within one, sent to either, with several CSCD and segment descriptors: the
// destination blocks hold the source's afterwards and no other block changes (SPC-4 6.4, the
// block device to block device segment descriptor 6.4.6.5).
func TestExtendedCopyBetweenLUNs(t *testing.T) {
	const blocks = 4096
	m, a, b, ma, mb := copyPair(t, blocks)
	wantA := readMedium(t, ma, 0, blocks*512)
	wantB := readMedium(t, mb, 0, blocks*512)

	// Sent to LUN 0: A[0..299] to B[1000..1299] in two segments (DC counts destination
	// blocks, the same here), A[4000..4095] to B[0..95], and B[2000..2007] to A[8..15].
	list := xcopyList(1, listIDRetain, [][]byte{identCSCD(a), identCSCD(b)}, [][]byte{
		b2bSegment(0, 1, 200, 0, 1000),
		b2bSegment(0, 1, 100, 200, 1200),
		b2bSegment(0, 1, 96, 4000, 0),
		b2bSegment(1, 0, 8, 2000, 8),
	})
	list[16+64+28+1] |= 0x02 // DC on the second segment
	checkGood(t, sendXCopy(m, testNexus, 0, list))
	copy(wantB[1000*512:], wantA[0:300*512])
	copy(wantB[0:], wantA[4000*512:])
	copy(wantA[8*512:], wantB[2000*512:2008*512])
	require.Equal(t, wantA, readMedium(t, ma, 0, blocks*512))
	require.Equal(t, wantB, readMedium(t, mb, 0, blocks*512))

	// Sent to LUN 0, a copy within B only (the copy manager is a third party); a zero-block
	// segment copies nothing.
	list = xcopyList(0, listIDNone, [][]byte{identCSCD(b)}, [][]byte{b2bSegment(0, 0, 16, 3000, 3500), b2bSegment(0, 0, 0, 0, 0)})
	checkGood(t, sendXCopy(m, testNexus, 0, list))
	copy(wantB[3500*512:], wantB[3000*512:3016*512])
	require.Equal(t, wantB, readMedium(t, mb, 0, blocks*512))
	require.Equal(t, wantA, readMedium(t, ma, 0, blocks*512))

	// LU ID TYPE (ignored in SPC-4), NUL (obsolete), RELATIVE INITIATOR PORT IDENTIFIER and
	// PRIORITY do not change the outcome.
	d := identCSCD(a)
	d[1] |= 0xE0
	d[2], d[3] = 0x12, 0x34
	list = xcopyList(0, listIDNone, [][]byte{d}, [][]byte{b2bSegment(0, 0, 4, 100, 3000)})
	list[1] |= 0x27 // STR, PRIORITY 7
	checkGood(t, sendXCopy(m, testNexus, 0, list))
	copy(wantA[3000*512:], wantA[100*512:104*512])
	require.Equal(t, wantA, readMedium(t, ma, 0, blocks*512))

	// A PARAMETER LIST LENGTH of zero copies nothing.
	c := run(m, testNexus, 0, xcopyCDB(0), nil, 0)
	checkGood(t, c)
	require.Zero(t, c.TransferLength)
}

// TestExtendedCopyOverlapping copies a range of one logical unit onto itself shifted up and down
// by less than its length, across several scratch buffers: the result is the source as it was
// before, as if it had been read whole first.
func TestExtendedCopyOverlapping(t *testing.T) {
	const blocks = 4096
	for _, shift := range []int{-700, -1, 1, 700} {
		m, a, _, ma, _ := copyPair(t, blocks)
		want := readMedium(t, ma, 0, blocks*512)
		src := 1000
		list := xcopyList(0, listIDNone, [][]byte{identCSCD(a)}, [][]byte{b2bSegment(0, 0, 2000, uint64(src), uint64(src+shift))})
		checkGood(t, sendXCopy(m, testNexus, 0, list))
		copy(want[(src+shift)*512:], append([]byte(nil), want[src*512:(src+2000)*512]...))
		require.Equal(t, want, readMedium(t, ma, 0, blocks*512), "shift %d", shift)
	}
}

// TestExtendedCopyRefusals sends parameter lists with one fault each and checks the sense data
// SPC-4 6.4 gives it and that neither medium changed: ILLEGAL REQUEST for what the list says
// (checked before anything moves), COPY ABORTED for what the copy targets make of it.
func TestExtendedCopyRefusals(t *testing.T) {
	const blocks = 64
	m, a, b, ma, mb := copyPair(t, blocks)
	before := cat(readMedium(t, ma, 0, blocks*512), readMedium(t, mb, 0, blocks*512))
	ca, cb := identCSCD(a), identCSCD(b)
	good := xcopyList(1, listIDRetain, [][]byte{ca, cb}, [][]byte{b2bSegment(0, 1, 8, 0, 8)})
	edit := func(f func(l []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	many := func(n int, d []byte) [][]byte {
		var l [][]byte
		for i := 0; i < n; i++ {
			l = append(l, d)
		}
		return l
	}
	unknown := identCSCD(a)
	unknown[8+15] ^= 0xFF // a NAA designator of no logical unit
	bigBlocks := identCSCD(a)
	bigBlocks[30] = 0x10 // DISK BLOCK LENGTH 4096

	const seg0 = 16 + 64 // the first segment descriptor, after two CSCD descriptors
	for _, tc := range []struct {
		name string
		list []byte
		want any // senseWant or copyAbortedWant
	}{
		// Lengths (libiscsi's ExtendedCopy.Param and .DescrLimits).
		{"list shorter than the header", good[:15], paramListLength},
		{"CSCD descriptor cut by the list length", good[:16+40], paramListLength},
		{"segment descriptor cut by the list length", good[:len(good)-1], paramListLength},
		{"descriptor lists over MAXIMUM DESCRIPTOR LIST LENGTH",
			xcopyList(1, 0, many(8, ca), many(17, b2bSegment(0, 0, 1, 0, 1))), paramListLength},
		{"inline data", edit(func(l []byte) []byte { l[15] = 4; return append(l, 0, 0, 0, 0) }),
			senseWant{0x5, 0x26, 0x0B, 12, -1, false, 0, false}},
		{"9 CSCD descriptors", xcopyList(1, 0, many(9, ca), [][]byte{b2bSegment(0, 0, 1, 0, 1)}),
			senseWant{0x5, 0x26, 0x06, -1, -1, false, 0, false}},
		{"17 segment descriptors", xcopyList(1, 0, [][]byte{ca}, many(17, b2bSegment(0, 0, 1, 0, 1))),
			senseWant{0x5, 0x26, 0x08, -1, -1, false, 0, false}},
		// Type codes (libiscsi's ExtendedCopy.DescrType).
		{"FC N_Port_Name CSCD", edit(func(l []byte) []byte { l[16+32] = 0xE0; return l }),
			senseWant{0x5, 0x26, 0x07, 48, -1, false, 0, false}},
		{"stream to stream segment", edit(func(l []byte) []byte { l[seg0] = 0x03; return l }),
			senseWant{0x5, 0x26, 0x09, seg0, -1, false, 0, false}},
		// The header.
		{"LIST ID USAGE 01b", edit(func(l []byte) []byte { l[1] = 0x08; return l }), invalidParam(1, 4)},
		{"LIST IDENTIFIER with LIST ID USAGE 11b", edit(func(l []byte) []byte { l[1] = 0x18; return l }), invalidParam(0, -1)},
		{"reserved bit 7 of byte 1", edit(func(l []byte) []byte { l[1] |= 0x80; return l }), invalidParam(1, 7)},
		{"reserved byte 6", edit(func(l []byte) []byte { l[6] = 1; return l }), invalidParam(6, -1)},
		// A CSCD descriptor's fields.
		{"peripheral device type 01h", edit(func(l []byte) []byte { l[16+1] = 0x01; return l }), invalidParam(17, 4)},
		{"protocol identifier", edit(func(l []byte) []byte { l[16+4] |= 0x40; return l }), invalidParam(20, 7)},
		{"PIV", edit(func(l []byte) []byte { l[16+5] |= 0x80; return l }), invalidParam(21, 7)},
		{"designator longer than 20 bytes", edit(func(l []byte) []byte { l[16+7] = 21; return l }), invalidParam(23, -1)},
		{"reserved bits of byte 28", edit(func(l []byte) []byte { l[16+28] = 0x01; return l }), invalidParam(44, 7)},
		// A segment descriptor's fields.
		{"DESCRIPTOR LENGTH 14h", edit(func(l []byte) []byte { l[seg0+3] = 0x14; return l }), invalidParam(seg0+2, -1)},
		{"reserved bits of byte 1", edit(func(l []byte) []byte { l[seg0+1] = 0x04; return l }), invalidParam(seg0+1, 7)},
		{"reserved byte 9", edit(func(l []byte) []byte { l[seg0+9] = 1; return l }), invalidParam(seg0+8, -1)},
		{"more than MAXIMUM SEGMENT LENGTH", xcopyList(0, 3, [][]byte{ca, cb}, [][]byte{b2bSegment(0, 1, 32769, 0, 0)}),
			invalidParam(seg0+10, -1)},
		{"DISK BLOCK LENGTH of another block size", xcopyList(0, 3, [][]byte{bigBlocks}, [][]byte{b2bSegment(0, 0, 1, 0, 1)}),
			invalidParam(16+29, -1)},
		// What the copy targets make of it (libiscsi's ExtendedCopy.ValidateSegDescr).
		{"destination CSCD index past the list", xcopyList(0, 3, [][]byte{ca}, [][]byte{b2bSegment(0, 0, 1, 0, 1), b2bSegment(0, 1, 1, 0, 1)}),
			copyAbortedWant{0x0D, 0x02, 1, true, 6}},
		{"designator of no logical unit", xcopyList(0, 3, [][]byte{ca, unknown}, [][]byte{b2bSegment(0, 1, 1, 0, 1)}),
			copyAbortedWant{0x0D, 0x02, 0, false, 48 + 4}},
		{"destination past the end of the medium", xcopyList(0, 3, [][]byte{ca, cb}, [][]byte{b2bSegment(0, 1, 1, 0, 1), b2bSegment(0, 1, 8, 0, blocks-7)}),
			copyAbortedWant{0x00, 0x00, 1, true, 20}},
		{"source past the end of the medium", xcopyList(0, 3, [][]byte{ca, cb}, [][]byte{b2bSegment(1, 0, 2, blocks-1, 0)}),
			copyAbortedWant{0x00, 0x00, 0, true, 12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sendXCopy(m, testNexus, 0, tc.list)
			switch w := tc.want.(type) {
			case senseWant:
				checkSense(t, c, w)
			case copyAbortedWant:
				checkCopyAborted(t, c, w)
			}
			require.Equal(t, before, cat(readMedium(t, ma, 0, blocks*512), readMedium(t, mb, 0, blocks*512)), "a medium changed")
		})
	}

	// A data-out buffer shorter than the PARAMETER LIST LENGTH.
	checkSense(t, run(m, testNexus, 0, xcopyCDB(uint32(len(good))), good[:20], 0), invalidCDB(10, -1))
	// A data-out buffer longer is fine: the list is what the length says.
	checkGood(t, run(m, testNexus, 0, xcopyCDB(uint32(len(good))), append(append([]byte(nil), good...), 1, 2, 3), 0))
}

// TestExtendedCopyACLAttack is the attack LIO's CVE-2020-28374 allowed: an initiator whose ACL
// shows it one logical unit names in an EXTENDED COPY another logical unit of the target, by
// the NAA designator it can learn or guess, to read it (copying it into its own) or to
// overwrite it (copying its own over it). The copy manager finds copy targets only among the
// logical units of the initiator's LUN map: both attempts end in COPY ABORTED, COPY TARGET
// DEVICE NOT REACHABLE, and neither logical unit changes.
func TestExtendedCopyACLAttack(t *testing.T) {
	const blocks = 64
	_, a, victim, ma, mv := copyPair(t, blocks)
	attacker, err := NewLUNMap([]Mapping{{LUN: 0, LU: a}}) // the attacker's ACL: LU a only
	require.NoError(t, err)
	ownBefore, victimBefore := readMedium(t, ma, 0, blocks*512), readMedium(t, mv, 0, blocks*512)

	steal := xcopyList(0, listIDNone, [][]byte{identCSCD(victim), identCSCD(a)}, [][]byte{b2bSegment(0, 1, 64, 0, 0)})
	checkCopyAborted(t, sendXCopy(attacker, otherNexus, 0, steal), copyAbortedWant{0x0D, 0x02, 0, false, 16 + 4})
	overwrite := xcopyList(0, listIDNone, [][]byte{identCSCD(a), identCSCD(victim)}, [][]byte{b2bSegment(0, 1, 64, 0, 0)})
	checkCopyAborted(t, sendXCopy(attacker, otherNexus, 0, overwrite), copyAbortedWant{0x0D, 0x02, 0, false, 48 + 4})

	require.Equal(t, ownBefore, readMedium(t, ma, 0, blocks*512), "the attacker's own LU got the victim's data")
	require.Equal(t, victimBefore, readMedium(t, mv, 0, blocks*512), "the victim was overwritten")
}

// TestExtendedCopyProtection: a destination the initiator may not write (a read-only mapping)
// ends the copy with COPY ABORTED, WRITE PROTECTED; the source may be read-only. A copy target
// whose persistent reservation refuses the initiator a write (as destination) or a read (as
// source) ends it in RESERVATION CONFLICT, as a WRITE or READ from that I_T nexus would; a
// write exclusive reservation lets it read.
func TestExtendedCopyProtection(t *testing.T) {
	const blocks = 64
	_, a, b, ma, mb := copyPair(t, blocks)
	m, err := NewLUNMap([]Mapping{{LUN: 0, LU: a}, {LUN: 1, LU: b, ReadOnly: true}})
	require.NoError(t, err)
	bBefore := readMedium(t, mb, 0, blocks*512)
	intoB := xcopyList(0, listIDNone, [][]byte{identCSCD(a), identCSCD(b)}, [][]byte{b2bSegment(0, 1, 8, 0, 0)})
	fromB := xcopyList(0, listIDNone, [][]byte{identCSCD(b), identCSCD(a)}, [][]byte{b2bSegment(0, 1, 8, 0, 0)})
	checkCopyAborted(t, sendXCopy(m, testNexus, 0, intoB), copyAbortedWant{0x27, 0x00, 0, false, -1})
	require.Equal(t, bBefore, readMedium(t, mb, 0, blocks*512))
	checkGood(t, sendXCopy(m, testNexus, 0, fromB))
	require.Equal(t, bBefore[:8*512], readMedium(t, ma, 0, 8*512))

	// otherNexus holds a reservation on b; testNexus is not registered.
	m, err = NewLUNMap([]Mapping{{LUN: 0, LU: a}, {LUN: 1, LU: b}})
	require.NoError(t, err)
	requireGood(t, run(m, otherNexus, 1, prOutCDB(prOutRegisterAndIgnore, 0, 24), prParams(0, 0x77, 0), 0))
	requireGood(t, run(m, otherNexus, 1, prOutCDB(prOutReserve, PRTypeWriteExclusive, 24), prParams(0x77, 0, 0), 0))
	aBefore := readMedium(t, ma, 0, blocks*512)
	c := sendXCopy(m, testNexus, 0, intoB)
	require.Equal(t, StatusReservationConflict, c.Status)
	require.Equal(t, bBefore, readMedium(t, mb, 0, blocks*512))
	checkGood(t, sendXCopy(m, testNexus, 0, fromB)) // write exclusive: reads are allowed

	requireGood(t, run(m, otherNexus, 1, prOutCDB(prOutRelease, PRTypeWriteExclusive, 24), prParams(0x77, 0, 0), 0))
	requireGood(t, run(m, otherNexus, 1, prOutCDB(prOutReserve, PRTypeExclusiveAccess, 24), prParams(0x77, 0, 0), 0))
	require.NoError(t, ma.WriteAt(aBefore, 0, false))
	c = sendXCopy(m, testNexus, 0, fromB)
	require.Equal(t, StatusReservationConflict, c.Status)
	require.Equal(t, aBefore, readMedium(t, ma, 0, blocks*512))
}

// TestReceiveCopyResults checks RECEIVE COPY RESULTS: OPERATING PARAMETERS byte by byte (SPC-4
// 6.18.4), and COPY STATUS (6.18.3) of this nexus's copies: INVALID FIELD IN CDB on the LIST
// IDENTIFIER for one the copy manager does not know (never started, not kept with LIST ID
// USAGE 11b, another nexus's, already reported), completed without errors with the segments
// and bytes, or with errors after an I/O error in the second segment, which the EXTENDED COPY
// reported as COPY ABORTED with the medium error's code, the failed LBA and the segment.
func TestReceiveCopyResults(t *testing.T) {
	m, a, b, ma, _ := copyPair(t, 64)
	want := cat(
		[]byte{0, 0, 0, 42},
		[]byte{0x01, 0, 0, 0},
		[]byte{0, 8, 0, 16},
		[]byte{0, 0, 0x02, 0xC0},
		[]byte{0x01, 0x00, 0x00, 0x00}, // MAXIMUM SEGMENT LENGTH 16 MiB
		zeros(12),
		[]byte{0, 0, 0, 16, 16, 9, 0, 0},
		[]byte{0, 0, 0, 2, 0x02, 0xE4},
	)
	requireData(t, run(m, testNexus, 0, copyResultsCDB(0x03, 0, 1024), nil, 1024), want, len(want))
	requireData(t, run(m, testNexus, 0, copyResultsCDB(0x03, 0, 8), nil, 1024), want[:8], 8)

	status := func(n *Nexus, id byte) *Command { return run(m, n, 0, copyResultsCDB(0x00, id, 12), nil, 12) }
	checkSense(t, status(testNexus, 1), invalidCDB(2, -1))

	list := xcopyList(1, listIDHoldData, [][]byte{identCSCD(a), identCSCD(b)}, [][]byte{b2bSegment(0, 1, 8, 0, 0), b2bSegment(1, 0, 3, 10, 20)})
	checkGood(t, sendXCopy(m, testNexus, 0, list))
	checkSense(t, status(otherNexus, 1), invalidCDB(2, -1))
	requireData(t, status(testNexus, 1), []byte{0, 0, 0, 8, copyCompletedGood, 0, 2, 0x00, 0, 0, 0x16, 0x00}, 12) // 11 blocks
	checkSense(t, status(testNexus, 1), invalidCDB(2, -1))

	checkGood(t, sendXCopy(m, testNexus, 0, xcopyList(0, listIDNone, [][]byte{identCSCD(a)}, [][]byte{b2bSegment(0, 0, 1, 0, 1)})))
	checkSense(t, status(testNexus, 0), invalidCDB(2, -1))

	// An I/O error in the second segment's source.
	f := faultstore.New(ma)
	fa, err := NewLogicalUnit(Config{Backstore: f, Serial: "c0b1e5000003", WriteCache: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = fa.Close() })
	fm, err := NewLUNMap([]Mapping{{LUN: 0, LU: fa}, {LUN: 1, LU: b}})
	require.NoError(t, err)
	clearPowerOnUA(t, fm, testNexus)
	f.Inject(faultstore.OpRead, 40*512, 512, syscall.EIO)
	list = xcopyList(9, listIDRetain, [][]byte{identCSCD(fa), identCSCD(b)}, [][]byte{b2bSegment(0, 1, 4, 0, 0), b2bSegment(0, 1, 8, 36, 8)})
	c2 := sendXCopy(fm, testNexus, 0, list)
	s := c2.SenseData()
	checkCopyAborted(t, c2, copyAbortedWant{0x11, 0x00, 1, false, -1})
	require.Equal(t, byte(0x80), s[0]&0x80, "VALID")
	require.Equal(t, uint32(36), binary.BigEndian.Uint32(s[3:7]), "INFORMATION: the first LBA of the chunk that failed")
	requireData(t, run(fm, testNexus, 0, copyResultsCDB(0x00, 9, 12), nil, 12),
		[]byte{0, 0, 0, 8, copyCompletedWithErrs, 0, 1, 0x00, 0, 0, 0x08, 0x00}, 12) // 4 blocks
}

// newGateCopyLU makes a logical unit of blocks blocks over a gate store, at LUN 0 of a map.
func newGateCopyLU(t *testing.T, blocks int64) (*LogicalUnit, *LUNMap, *gatestore.Store, *backstore.Memory) {
	t.Helper()
	mem, err := backstore.NewMemory(blocks*512, 512)
	require.NoError(t, err)
	require.NoError(t, mem.WriteAt(testutil.Pattern(int(blocks)*512, 3), 0, false))
	g := gatestore.New(mem)
	lu, m := newLUOver(t, g, nil)
	return lu, m, g, mem
}

// TestExtendedCopyInProgress holds an EXTENDED COPY at its first read: meanwhile COPY STATUS
// says in progress with nothing transferred, another EXTENDED COPY with the same LIST
// IDENTIFIER from the same I_T nexus is OPERATION IN PROGRESS (SPC-4 6.4.3), and the same
// LIST IDENTIFIER from another nexus is another copy. Once let go it completes.
func TestExtendedCopyInProgress(t *testing.T) {
	lu, m, g, mem := newGateCopyLU(t, 64)
	list := xcopyList(3, listIDHoldData, [][]byte{identCSCD(lu)}, [][]byte{b2bSegment(0, 0, 8, 0, 16)})
	open := g.Gate(0)
	p := start(m, testNexus, 1, TaskSimple, xcopyCDB(uint32(len(list))), list, 0)
	g.RequireEntered(t, 0)

	requireData(t, run(m, testNexus, 0, copyResultsCDB(0x00, 3, 12), nil, 12),
		[]byte{0, 0, 0, 8, copyInProgress, 0, 0, 0, 0, 0, 0, 0}, 12)
	checkSense(t, sendXCopy(m, testNexus, 0, list), senseWant{0x5, 0x00, 0x16, -1, -1, false, 0, false})
	other := xcopyList(3, listIDHoldData, [][]byte{identCSCD(lu)}, [][]byte{b2bSegment(0, 0, 8, 32, 48)})
	checkGood(t, sendXCopy(m, otherNexus, 0, other))

	open()
	checkGood(t, p.wait(t))
	requireData(t, run(m, testNexus, 0, copyResultsCDB(0x00, 3, 12), nil, 12),
		[]byte{0, 0, 0, 8, copyCompletedGood, 0, 1, 0, 0, 0, 0x10, 0}, 12)
	want := testutil.Pattern(64*512, 3)
	copy(want[16*512:], want[0:8*512])
	copy(want[48*512:], want[32*512:40*512])
	require.Equal(t, want, readMedium(t, mem, 0, 64*512))
}

// TestExtendedCopyAbort: ABORT TASK of an EXTENDED COPY waits for it and stops it at the chunk
// it was in: the blocks read while it was aborted are not written, the next segment never
// starts.
func TestExtendedCopyAbort(t *testing.T) {
	lu, m, g, mem := newGateCopyLU(t, 64)
	list := xcopyList(0, listIDNone, [][]byte{identCSCD(lu)}, [][]byte{b2bSegment(0, 0, 8, 0, 16), b2bSegment(0, 0, 8, 8, 24)})
	open := g.Gate(0)
	p := start(m, testNexus, 5, TaskSimple, xcopyCDB(uint32(len(list))), list, 0)
	g.RequireEntered(t, 0)
	g.TakeOrder()

	r := tmfAsync(func() TMFResponse { return m.AbortTask(testNexus, EncodeLUN(0), 5) })
	waitTMFWaiting(t, lu, r, "ABORT TASK")
	openAborted(t, r, p, open)
	require.Equal(t, []string{"read 0"}, g.TakeOrder(), "nothing but the read it was in")
	require.Equal(t, testutil.Pattern(64*512, 3), readMedium(t, mem, 0, 64*512))
}

// TestExtendedCopyTimeLimit: a copy still running after xcopyTimeLimit stops at the next chunk
// with COPY ABORTED, LOGICAL UNIT COMMUNICATION TIME-OUT, having written the chunks before; COPY
// STATUS counts them.
func TestExtendedCopyTimeLimit(t *testing.T) {
	defer func(d time.Duration) { xcopyTimeLimit = d }(xcopyTimeLimit)
	xcopyTimeLimit = 50 * time.Millisecond
	lu, m, g, mem := newGateCopyLU(t, 2048)
	// 512 blocks: two chunks of the 128 KiB scratch buffer.
	list := xcopyList(4, listIDRetain, [][]byte{identCSCD(lu)}, [][]byte{b2bSegment(0, 0, 512, 0, 1024)})
	open := g.Gate(0)
	p := start(m, testNexus, 1, TaskSimple, xcopyCDB(uint32(len(list))), list, 0)
	g.RequireEntered(t, 0)
	time.Sleep(2 * xcopyTimeLimit)
	open()
	checkCopyAborted(t, p.wait(t), copyAbortedWant{0x08, 0x01, 0, false, -1})
	want := testutil.Pattern(2048*512, 3)
	copy(want[1024*512:], want[0:256*512])
	require.Equal(t, want, readMedium(t, mem, 0, 2048*512), "the first chunk only")
	requireData(t, run(m, testNexus, 0, copyResultsCDB(0x00, 4, 12), nil, 12),
		[]byte{0, 0, 0, 8, copyCompletedWithErrs, 0, 0, 0, 0, 0x02, 0, 0}, 12)
}

// TestThirdPartyCopyVPD checks the THIRD-PARTY COPY VPD page byte by byte (SPC-4 7.8.17) and
// that the supported pages list it.
func TestThirdPartyCopyVPD(t *testing.T) {
	_, m := readyMap(t, nil)
	want := cat(
		[]byte{0x00, 0x8F, 0x00, 0x60},
		// Supported Commands: 83h/00h, 84h/00h 03h.
		[]byte{0x00, 0x01, 0x00, 0x08, 0x07, 0x83, 0x01, 0x00, 0x84, 0x02, 0x00, 0x03},
		// Parameter Data: 8 CSCDs, 16 segments, 704 bytes, no inline data.
		[]byte{0x00, 0x04, 0x00, 0x1C}, zeros(4), []byte{0x00, 0x08, 0x00, 0x10, 0x00, 0x00, 0x02, 0xC0}, zeros(16),
		// Supported Descriptors: 02h, E4h.
		[]byte{0x00, 0x08, 0x00, 0x04, 0x02, 0x02, 0xE4, 0x00},
		// Supported CSCD Descriptor IDs: none.
		[]byte{0x00, 0x0C, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00},
		// General Copy Operations: 16 copies, 16 MiB segments, granularity 2^0 blocks.
		[]byte{0x80, 0x01, 0x00, 0x20, 0, 0, 0, 16, 0, 0, 0, 16, 0x01, 0x00, 0x00, 0x00, 0, 0}, zeros(18),
	)
	requireData(t, run(m, testNexus, 0, vpdCDB(0x8F, 1024), nil, 1024), want, len(want))
}
