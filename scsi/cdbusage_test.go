package scsi

import (
	"bytes"
	"fmt"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/require"
)

// cdbBase is a CDB of one command that completes with GOOD on the logical unit of
// TestCDBReservedBits, with its data-out and the size of its data-in buffer. Each command that
// writes has blocks of its own and writes what is there already (zeroes), so that it can run
// any number of times with the same result; setup, when not nil, sends before each run the
// commands that put the reservations in the state the command needs.
type cdbBase struct {
	cdb   []byte
	out   []byte
	in    int
	setup []prStep
	// prep are commands (CDB and data-out) that must complete with GOOD before each run.
	prep [][2][]byte
}

// prStep is a PERSISTENT RESERVE OUT from the nexus of TestCDBReservedBits that must complete
// with GOOD.
type prStep struct {
	sa, typ byte
	params  []byte
}

// reservedBitsBases has a base CDB for every command of the command table; a command added to
// the table without one fails TestCDBReservedBits. other is an initiator port that REGISTER AND
// MOVE moves the reservation to, through relative port 1.
func reservedBitsBases(lu *LogicalUnit, other [16]byte) map[string]cdbBase {
	const bs = 512
	const key = 0xABCD
	copyOfZeroes := xcopyList(0, listIDNone, [][]byte{identCSCD(lu)}, [][]byte{b2bSegment(0, 0, 2, 70, 72)})
	keptCopy := xcopyList(7, listIDRetain, [][]byte{identCSCD(lu)}, [][]byte{b2bSegment(0, 0, 2, 70, 72)})
	we := byte(PRTypeWriteExclusive)
	prOut := func(sa, typ byte, params []byte, setup ...prStep) cdbBase {
		return cdbBase{cdb: prOutCDB(sa, typ, uint32(len(params))), out: params, setup: setup}
	}
	register := prStep{prOutRegisterAndIgnore, 0, prParams(0, key, 0)}
	unregister := prStep{prOutRegisterAndIgnore, 0, prParams(0, 0, 0)}
	reserve := prStep{prOutReserve, we, prParams(key, 0, 0)}
	clear := prStep{prOutClear, 0, prParams(key, 0, 0)}
	return map[string]cdbBase{
		"TEST UNIT READY":              {cdb: []byte{0x00, 0, 0, 0, 0, 0}},
		"REQUEST SENSE":                {cdb: []byte{0x03, 0, 0, 0, 18, 0}, in: 18},
		"INQUIRY":                      {cdb: []byte{0x12, 0, 0, 0, 36, 0}, in: 36},
		"MODE SELECT(6)":               {cdb: modeSelect6(true, false, 0)},
		"MODE SENSE(6)":                {cdb: modeSense6(false, 0, 0x3F, 0, 255), in: 255},
		"PREVENT ALLOW MEDIUM REMOVAL": {cdb: []byte{0x1E, 0, 0, 0, 0, 0}},
		"READ CAPACITY(10)":            {cdb: readCap10(), in: 8},
		"MODE SELECT(10)":              {cdb: modeSelect10(0)},
		"MODE SENSE(10)":               {cdb: modeSense10(false, false, 0, 0x3F, 0, 512), in: 512},
		"READ CAPACITY(16)":            {cdb: readCap16(32), in: 32},
		"REPORT LUNS":                  {cdb: reportLUNsCDB(0, 512), in: 512},
		"REPORT SUPPORTED OPERATION CODES": {
			cdb: rsocCDB(false, 0, 0, 0, 4096), in: 4096},
		"REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS": {
			cdb: []byte{0xA3, 0x0D, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0}, in: 16},
		"REPORT TARGET PORT GROUPS": {cdb: rtpgCDB(0, 512), in: 512},
		"SET TARGET PORT GROUPS":    {cdb: stpgCDB(8), out: stpgParams(groupState{1, ActiveOptimized})},

		"READ(6)":               {cdb: []byte{0x08, 0, 0, 1, 1, 0}, in: bs},
		"READ(10)":              {cdb: cdb10(0x28, 0, 1, 1), in: bs},
		"READ(12)":              {cdb: cdb12(0xA8, 0, 1, 1), in: bs},
		"READ(16)":              {cdb: cdb16(0x88, 0, 1, 1), in: bs},
		"WRITE(6)":              {cdb: []byte{0x0A, 0, 0, 10, 1, 0}, out: zeros(bs)},
		"WRITE(10)":             {cdb: cdb10(0x2A, 0, 11, 1), out: zeros(bs)},
		"WRITE(12)":             {cdb: cdb12(0xAA, 0, 12, 1), out: zeros(bs)},
		"WRITE(16)":             {cdb: cdb16(0x8A, 0, 13, 1), out: zeros(bs)},
		"WRITE AND VERIFY(10)":  {cdb: cdb10(0x2E, 0x02, 20, 1), out: zeros(bs)},
		"WRITE AND VERIFY(12)":  {cdb: cdb12(0xAE, 0x02, 21, 1), out: zeros(bs)},
		"WRITE AND VERIFY(16)":  {cdb: cdb16(0x8E, 0x02, 22, 1), out: zeros(bs)},
		"VERIFY(10)":            {cdb: cdb10(0x2F, 0x02, 30, 1), out: zeros(bs)},
		"VERIFY(12)":            {cdb: cdb12(0xAF, 0x02, 30, 1), out: zeros(bs)},
		"VERIFY(16)":            {cdb: cdb16(0x8F, 0x02, 30, 1), out: zeros(bs)},
		"SYNCHRONIZE CACHE(10)": {cdb: cdb10(0x35, 0, 0, 0)},
		"SYNCHRONIZE CACHE(16)": {cdb: cdb16(0x91, 0, 0, 0)},
		"UNMAP":                 {cdb: unmapCDB(24), out: unmapList([2]uint64{40, 8})},
		"WRITE SAME(10)":        {cdb: cdb10(0x41, 0, 50, 2), out: zeros(bs)},
		"WRITE SAME(16)":        {cdb: cdb16(0x93, 0, 52, 2), out: zeros(bs)},
		"COMPARE AND WRITE":     {cdb: cawCDB(0, 60, 1), out: zeros(2 * bs)},
		"START STOP UNIT":       {cdb: []byte{0x1B, 0, 0, 0, 0x01, 0}},
		"PRE-FETCH(10)":         {cdb: cdb10(0x34, 0, 10, 20)},
		"PRE-FETCH(16)":         {cdb: cdb16(0x90, 0, 10, 20)},
		"READ DEFECT DATA(10)": {
			cdb: []byte{0x37, 0, defectReqPList | defectReqGList, 0, 0, 0, 0, 0, 4, 0}, in: 4},
		"READ DEFECT DATA(12)": {
			cdb: []byte{0xB7, defectReqGList, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0}, in: 8},
		"GET LBA STATUS": {cdb: getLBAStatusCDB(0, 1024), in: 1024},
		// A copy of two blocks of zeroes over two others within the logical unit; COPY
		// STATUS after one with LIST IDENTIFIER 7 whose status is kept.
		"EXTENDED COPY(LID1)": {cdb: xcopyCDB(uint32(len(copyOfZeroes))), out: copyOfZeroes},
		"RECEIVE COPY RESULTS COPY STATUS": {cdb: copyResultsCDB(0x00, 7, 12), in: 12,
			prep: [][2][]byte{{xcopyCDB(uint32(len(keptCopy))), keptCopy}}},
		"RECEIVE COPY RESULTS OPERATING PARAMETERS": {cdb: copyResultsCDB(0x03, 0, 64), in: 64},
		"WRITE ATOMIC(16)":                          {cdb: writeAtomicCDB(0, 80, 0, 2), out: zeros(2 * bs)},
		"ORWRITE(16)":                               {cdb: cdb16(0x8B, 0, 90, 2), out: zeros(2 * bs)},
		// Overwriting the medium with zeroes, one pass; erasing it (all zeroes after).
		"SANITIZE OVERWRITE":         {cdb: sanitizeCDB(0x01, 5), out: []byte{0x01, 0, 0, 1, 0x00}},
		"SANITIZE BLOCK ERASE":       {cdb: sanitizeCDB(0x02, 0)},
		"SANITIZE EXIT FAILURE MODE": {cdb: sanitizeCDB(0x1F, 0)},

		"PERSISTENT RESERVE IN READ KEYS":           {cdb: prInCDB(0, 1024), in: 1024},
		"PERSISTENT RESERVE IN READ RESERVATION":    {cdb: prInCDB(1, 1024), in: 1024},
		"PERSISTENT RESERVE IN REPORT CAPABILITIES": {cdb: prInCDB(2, 1024), in: 1024},
		"PERSISTENT RESERVE IN READ FULL STATUS":    {cdb: prInCDB(3, 1024), in: 1024},
		"PERSISTENT RESERVE OUT REGISTER":           prOut(prOutRegister, 0, prParams(0, key, 0), unregister),
		"PERSISTENT RESERVE OUT RESERVE":            prOut(prOutReserve, we, prParams(key, 0, 0), register),
		"PERSISTENT RESERVE OUT RELEASE":            prOut(prOutRelease, we, prParams(key, 0, 0), register, reserve),
		"PERSISTENT RESERVE OUT CLEAR":              prOut(prOutClear, 0, prParams(key, 0, 0), register),
		// Preempting one's own key with no reservation keeps one's registration and
		// changes nothing else, and no other initiator gets a unit attention.
		"PERSISTENT RESERVE OUT PREEMPT":                          prOut(prOutPreempt, we, prParams(key, key, 0), register),
		"PERSISTENT RESERVE OUT PREEMPT AND ABORT":                prOut(prOutPreemptAndAbort, we, prParams(key, key, 0), register),
		"PERSISTENT RESERVE OUT REGISTER AND IGNORE EXISTING KEY": prOut(prOutRegisterAndIgnore, 0, prParams(0, key, 0)),
		"PERSISTENT RESERVE OUT REGISTER AND MOVE": prOut(prOutRegisterAndMove, we, moveParams(key, key+1, 0, 1, srpTID(other)),
			register, clear, register, reserve),
		"RESERVE(6)":  {cdb: []byte{0x16, 0, 0, 0, 0, 0}, setup: []prStep{register, clear}},
		"RELEASE(6)":  {cdb: []byte{0x17, 0, 0, 0, 0, 0}, setup: []prStep{register, clear}},
		"RESERVE(10)": {cdb: []byte{0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0}, setup: []prStep{register, clear}},
		"RELEASE(10)": {cdb: []byte{0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0}, setup: []prStep{register, clear}},
	}
}

// TestCDBReservedBits sets, one at a time, every CDB bit that the CDB usage data of a command
// leaves out, in a CDB that otherwise completes with GOOD, for every command of the table:
//
//   - a bit the command's ignored list names (obsolete fields, SBC-4), or a vendor specific bit
//     of the CONTROL byte, changes nothing: GOOD, the same data-in and the same backstore calls
//     as without it;
//   - any other bit is refused with INVALID FIELD IN CDB, the field pointer on its byte and the
//     bit pointer on it or on the left-most bit of the reserved field it belongs to (SPC-4
//     4.5.2.4.2), and the backstore sees no call at all.
//
// So the usage data REPORT SUPPORTED OPERATION CODES returns is what the device server does: a
// bit is marked when it is evaluated, and left out when it is refused or ignored (SPC-4 6.35.3).
func TestCDBReservedBits(t *testing.T) {
	_, n, _ := aluaNexuses(t, ActiveOptimized, ActiveOptimized) // REPORT TARGET PORT GROUPS needs ALUA
	// SET TARGET PORT GROUPS needs the states shared with another device server.
	shared := (&memPRCluster{}).newGateway(t).r
	lu, m, rec := newRecordingLU(t, 1024, 512, func(c *Config) { c.ThinProvisioning = true; c.Reservations = shared })
	clearPowerOnUA(t, m, n)
	bases := reservedBitsBases(lu, prInitiator(0x33))
	var ops []*opInfo
	for i := range commandTable {
		if e := &commandTable[i]; e.plain != nil {
			ops = append(ops, e.plain)
		} else {
			ops = append(ops, e.bySA...)
		}
	}
	require.Len(t, bases, len(ops), "one base CDB per command")

	exec := func(b cdbBase, cdb []byte) (*Command, []ioRecord) {
		for _, s := range b.setup {
			requireGood(t, sendPROut(m, n, s.sa, s.typ, s.params))
		}
		for _, p := range b.prep {
			requireGood(t, run(m, n, 0, p[0], p[1], 0))
		}
		rec.take()
		c := run(m, n, 0, cdb, bytes.Clone(b.out), b.in)
		return c, rec.take()
	}
	for _, op := range ops {
		b, ok := bases[op.name]
		require.True(t, ok, "no base CDB for %s", op.name)
		require.Len(t, b.cdb, op.cdbLength, op.name)
		last := op.cdbLength - 1
		require.Equal(t, byte(0x07), op.usage[last], "%s: CONTROL byte usage: NACA, FLAG, LINK", op.name)

		ignored := make([]byte, op.cdbLength)
		for _, f := range op.ignored {
			require.Zero(t, op.usage[f.off]&f.mask, "%s: ignored bits of byte %d are in the usage data", op.name, f.off)
			ignored[f.off] |= f.mask
		}
		// CONTROL (SAM-5 5.2): bits 7:6 vendor specific, ignored; 5:3 reserved, NACA (no ACA),
		// and the obsolete FLAG and LINK (no linked commands), refused.
		ignored[last] = 0xC0
		refused := make([]byte, op.cdbLength)
		for i := 1; i < last; i++ {
			refused[i] = ^(op.usage[i] | ignored[i])
		}
		refused[last] = 0x3F

		// Every command starts with no reservation of either kind.
		requireGood(t, sendPROut(m, n, prOutRegisterAndIgnore, 0, prParams(0, 1, 0)))
		requireGood(t, sendPROut(m, n, prOutClear, 0, prParams(1, 0, 0)))
		requireGood(t, run(m, n, 0, []byte{opRelease6, 0, 0, 0, 0, 0}, nil, 0))
		base, baseIO := exec(b, b.cdb)
		require.Equal(t, StatusGood, base.Status, "%s: base CDB % x: sense % x", op.name, b.cdb, base.SenseData())
		for i := 1; i <= last; i++ {
			for bit := 0; bit < 8; bit++ {
				mask := byte(1) << bit
				if (ignored[i]|refused[i])&mask == 0 {
					continue
				}
				cdb := bytes.Clone(b.cdb)
				cdb[i] |= mask
				c, io := exec(b, cdb)
				t.Run(fmt.Sprintf("%s/byte%d/bit%d", op.name, i, bit), func(t *testing.T) {
					if ignored[i]&mask != 0 {
						requireGood(t, c)
						require.Equal(t, data(base), data(c), "data-in")
						require.Equal(t, baseIO, io, "backstore calls")
						return
					}
					s := requireSense(t, c, ReasonInvalidFieldInCDB)
					require.True(t, s.FieldPointerValid && s.InCDB && s.BitPointerValid, "SKSV, C/D, BPV: %+v", s)
					require.Equal(t, uint16(i), s.FieldPointer, "field pointer")
					// The bit pointer names the bit, or the left-most bit of the run of refused
					// bits it is part of.
					top := bit + bits.TrailingZeros8(^(refused[i] >> bit)) - 1
					require.True(t, int(s.BitPointer) >= bit && int(s.BitPointer) <= top,
						"bit pointer %d outside bits %d..%d", s.BitPointer, bit, top)
					require.Empty(t, io, "the backstore saw calls")
				})
			}
		}
	}
}
