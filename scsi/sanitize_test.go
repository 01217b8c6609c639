package scsi

import (
	"encoding/binary"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/faultstore"
)

// sanitizeCDB is SANITIZE with byte 1 b1 (IMMED, AUSE, service action) and a PARAMETER LIST
// LENGTH of n.
func sanitizeCDB(b1 byte, n uint16) []byte {
	cdb := []byte{0x48, b1, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(cdb[7:], n)
	return cdb
}

// overwriteList is a SANITIZE OVERWRITE parameter list: byte 0 (INVERT, TEST, OVERWRITE COUNT)
// and the initialization pattern.
func overwriteList(b0 byte, pattern []byte) []byte {
	p := []byte{b0, 0, 0, 0}
	binary.BigEndian.PutUint16(p[2:], uint16(len(pattern)))
	return append(p, pattern...)
}

// sendOverwrite sends SANITIZE OVERWRITE with list and byte 1 flags (IMMED, AUSE).
func sendOverwrite(m *LUNMap, n *Nexus, flags byte, list []byte) *Command {
	return run(m, n, 0, sanitizeCDB(flags|0x01, uint16(len(list))), list, 0)
}

// notReadySanitize is NOT READY, LOGICAL UNIT NOT READY, SANITIZE IN PROGRESS (SBC-4 4.32.1)
// with the PROGRESS INDICATION progress (SPC-4 4.5.2.4.4) in the sense key specific bytes.
func requireSanitizing(t testing.TB, c *Command, progress uint16) {
	t.Helper()
	require.Equal(t, StatusCheckCondition, c.Status)
	s := c.SenseData()
	require.Equal(t, []byte{0x02, 0x04, 0x1B}, []byte{s[2] & 0x0F, s[12], s[13]}, "sense % x", s)
	require.Equal(t, []byte{0x80, byte(progress >> 8), byte(progress)}, s[15:18], "SKSV, PROGRESS INDICATION")
}

// TestSanitizeOverwrite checks SANITIZE OVERWRITE (SBC-4 5.30.3): the pattern, repeated to fill
// each block, over every block; with INVERT and an even OVERWRITE COUNT the first pass writes
// the inverse and the last the pattern; and each refusal libiscsi's Sanitize.Overwrite probes,
// with its sense data and nothing written.
func TestSanitizeOverwrite(t *testing.T) {
	const blocks = 600
	_, m, rec := newRecordingLU(t, blocks, 512, nil)
	mem := rec.Backstore.(*backstore.Memory)
	before := testutil.Pattern(blocks*512, 6)
	writeMedium(t, mem, 0, before)

	for _, tc := range []struct {
		name string
		cdb  []byte
		out  []byte
		want senseWant
	}{
		{"parameter list length 4", sanitizeCDB(0x01, 4), []byte{1, 0, 0, 0}, invalidCDB(7, -1)},
		{"parameter list length 0", sanitizeCDB(0x01, 0), nil, invalidCDB(7, -1)},
		{"parameter list length past the block", sanitizeCDB(0x01, 517), make([]byte, 517), invalidCDB(7, -1)},
		{"OVERWRITE COUNT 0", sanitizeCDB(0x01, 516), overwriteList(0x00, fill(512, 0xAA)), invalidParam(0, 4)},
		{"TEST 01b", sanitizeCDB(0x01, 516), overwriteList(0x21, fill(512, 0xAA)), invalidParam(0, 6)},
		{"reserved byte 1", sanitizeCDB(0x01, 5), []byte{1, 1, 0, 1, 0xAA}, invalidParam(1, -1)},
		{"pattern length 0", sanitizeCDB(0x01, 516), append([]byte{1, 0, 0, 0}, fill(512, 0xAA)...), invalidParam(2, -1)},
		{"pattern length past the block", sanitizeCDB(0x01, 516), append([]byte{1, 0, 0x02, 0x04}, fill(512, 0xAA)...), invalidParam(2, -1)},
		{"pattern length not the list's", sanitizeCDB(0x01, 8), []byte{1, 0, 0, 2, 1, 2, 3, 4}, invalidParam(2, -1)},
		{"ZNR", sanitizeCDB(0x41, 5), []byte{1, 0, 0, 1, 0xAA}, invalidCDB(1, 6)},
		{"reserved byte 3", append(sanitizeCDB(0x01, 5)[:3], 1, 0, 0, 0, 0, 5, 0), []byte{1, 0, 0, 1, 0xAA}, invalidCDB(3, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkSense(t, exec(m, tc.cdb, tc.out, 0), tc.want)
			require.Empty(t, rec.take())
			require.Equal(t, before, readMedium(t, mem, 0, blocks*512))
		})
	}

	// One full block of 0xAA; half a block; 4 bytes; each over the whole medium.
	for _, pattern := range [][]byte{fill(512, 0xAA), testutil.Pattern(256, 3), {1, 2, 3, 4}} {
		checkGood(t, sendOverwrite(m, testNexus, 0, overwriteList(0x01, pattern)))
		want := make([]byte, blocks*512)
		for i := 0; i < len(want); i += len(pattern) {
			copy(want[i:], pattern)
		}
		require.Equal(t, want, readMedium(t, mem, 0, blocks*512))
	}
	rec.take()

	// INVERT with two passes: the inverse first, then the pattern; each pass covers the medium
	// in chunks of the 128 KiB scratch buffer (256 + 256 + 88 blocks).
	checkGood(t, sendOverwrite(m, testNexus, 0, overwriteList(0x82, []byte{0x0F})))
	require.Equal(t, fill(blocks*512, 0x0F), readMedium(t, mem, 0, blocks*512))
	pass := []ioRecord{{op: "write", off: 0, len: 256 * 512}, {op: "write", off: 256 * 512, len: 256 * 512},
		{op: "write", off: 512 * 512, len: 88 * 512}}
	require.Equal(t, append(append([]ioRecord(nil), pass...), pass...), rec.take())
}

// TestSanitizeBlockErase checks SANITIZE BLOCK ERASE: every block deallocated and reading zeroes
// (the RAM store gives its memory back), WABEREQ 01b in the Block Device Characteristics page;
// a PARAMETER LIST LENGTH is INVALID FIELD IN CDB; on a store whose deallocated blocks need not
// read as zeroes, zeroes are written before deallocating; without thin provisioning it is an
// unsupported service action.
func TestSanitizeBlockErase(t *testing.T) {
	const blocks = 4096
	_, m, mem := newMemLU(t, blocks, 512, func(c *Config) { c.ThinProvisioning = true })
	writeMedium(t, mem, 0, testutil.Pattern(blocks*512, 2))
	require.NotZero(t, mem.Allocated())
	checkSense(t, exec(m, sanitizeCDB(0x02, 8), zeros(8), 0), invalidCDB(7, -1))
	checkGood(t, exec(m, sanitizeCDB(0x02, 0), nil, 0))
	require.Equal(t, zeros(blocks*512), readMedium(t, mem, 0, blocks*512))
	require.Zero(t, mem.Allocated(), "every chunk given back")
	c := exec(m, vpdCDB(0xB1, 64), nil, 64)
	checkGood(t, c)
	require.Equal(t, byte(0x40), data(c)[7], "WABEREQ 01b")

	mem2, err := backstore.NewMemory(64*512, 512)
	require.NoError(t, err)
	rec := &recordingStore{Backstore: &capsStore{Backstore: mem2, caps: backstore.Capabilities{Unmap: true}}}
	_, m2 := newLUOver(t, rec, func(c *Config) { c.ThinProvisioning = true })
	rec.take()
	checkGood(t, exec(m2, sanitizeCDB(0x02, 0), nil, 0))
	require.Equal(t, []ioRecord{{op: "zeroes", len: 64 * 512}, {op: "unmap", len: 64 * 512}}, rec.take())

	_, m3, _ := newMemLU(t, 64, 512, nil)
	checkSense(t, exec(m3, sanitizeCDB(0x02, 0), nil, 0), invalidCDB(1, 4))
	requireData(t, exec(m3, rsocCDB(false, 2, 0x48, 0x02, 64), nil, 64), []byte{0, 0x01, 0, 0}, 4)
	c = exec(m3, vpdCDB(0xB1, 64), nil, 64)
	require.Zero(t, data(c)[7], "WABEREQ 00b without BLOCK ERASE")
}

// TestSanitizeInProgress holds a SANITIZE OVERWRITE with IMMED at the third of its four chunks:
// it has completed with GOOD, and meanwhile TEST UNIT READY, READ, START STOP UNIT and another
// SANITIZE end in NOT READY, SANITIZE IN PROGRESS with the progress (half done), REQUEST SENSE
// returns the same as its parameter data with GOOD, and INQUIRY and REPORT LUNS work. Once let
// go the operation completes and the logical unit is ready again.
func TestSanitizeInProgress(t *testing.T) {
	lu, m, g := newGateLU(t, sanitizeBlocks, nil)
	open := g.Gate(512 * 512)
	checkGood(t, sendOverwrite(m, testNexus, 0x80, overwriteList(0x01, []byte{0x5A})))
	g.RequireEntered(t, 512*512)

	const half = 0x8000
	requireSanitizing(t, turFrom(m, testNexus), half)
	requireSanitizing(t, exec(m, cdb10(0x28, 0, 0, 1), nil, 512), half)
	requireSanitizing(t, exec(m, []byte{0x1B, 0, 0, 0, 0x01, 0}, nil, 0), half)
	requireSanitizing(t, sendOverwrite(m, otherNexus, 0x80, overwriteList(0x01, []byte{0})), half)
	c := run(m, testNexus, 0, []byte{0x03, 0, 0, 0, 18, 0}, nil, 18)
	requireGood(t, c)
	require.Equal(t, []byte{0x70, 0, 0x02, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x04, 0x1B, 0, 0x80, 0x80, 0x00}, data(c))
	requireGood(t, run(m, testNexus, 0, []byte{0x12, 0, 0, 0, 36, 0}, nil, 36))
	requireGood(t, run(m, testNexus, 0, reportLUNsCDB(0, 64), nil, 64))

	open()
	testutil.WaitFor(t, "the sanitize to end", func() bool { return lu.sanitizing.running.Load() == nil })
	checkGood(t, turFrom(m, testNexus))
	c = exec(m, cdb10(0x28, 0, 1000, 1), nil, 512)
	checkGood(t, c)
	require.Equal(t, fill(512, 0x5A), data(c))
}

// sanitizeBlocks is four 128 KiB chunks of the sanitize.
const sanitizeBlocks = 1024

// TestSanitizeOutlivesTheCommand: a SANITIZE without IMMED waits for its operation, but ABORT
// TASK ends the command while the operation goes on (SBC-4 4.32.2), and so does a LOGICAL UNIT
// RESET: the logical unit stays NOT READY until the operation ends.
func TestSanitizeOutlivesTheCommand(t *testing.T) {
	lu, m, g := newGateLU(t, sanitizeBlocks, nil)
	open := g.Gate(256 * 512)
	p := start(m, testNexus, 9, TaskSimple, sanitizeCDB(0x01, 5), overwriteList(0x01, []byte{0x77}), 0)
	g.RequireEntered(t, 256*512)
	p.requireRunning(t)

	require.Equal(t, TMFComplete, m.AbortTask(testNexus, EncodeLUN(0), 9))
	p.wait(t)
	require.True(t, p.c.Aborted())
	requireSanitizing(t, turFrom(m, testNexus), 0x4000)
	require.Equal(t, TMFComplete, m.LogicalUnitReset(testNexus, EncodeLUN(0)))
	c := turFrom(m, otherNexus)
	require.Equal(t, StatusCheckCondition, c.Status) // the reset's unit attention first
	requireSanitizing(t, turFrom(m, otherNexus), 0x4000)

	open()
	testutil.WaitFor(t, "the sanitize to end", func() bool { return lu.sanitizing.running.Load() == nil })
	turFrom(m, testNexus) // the reset's unit attention
	checkGood(t, turFrom(m, testNexus))
}

// TestSanitizeFailure: a sanitize whose writes fail ends its command in MEDIUM ERROR, SANITIZE
// COMMAND FAILED and leaves the logical unit in the sanitize failure mode: commands but INQUIRY,
// REPORT LUNS, REQUEST SENSE and SANITIZE end in the same. After a failure in the restricted
// completion mode (AUSE 0) EXIT FAILURE MODE and a SANITIZE with AUSE are INVALID FIELD IN CDB,
// and a SANITIZE that succeeds clears it; after one with AUSE, EXIT FAILURE MODE does.
func TestSanitizeFailure(t *testing.T) {
	mem, err := backstore.NewMemory(256*512, 512)
	require.NoError(t, err)
	f := faultstore.New(mem)
	_, m := newLUOver(t, f, nil)
	failed := senseWant{0x3, 0x31, 0x03, -1, -1, false, 0, false}
	list := overwriteList(0x01, []byte{0x11})

	f.Inject(faultstore.OpWrite, 0, 256*512, syscall.EIO)
	checkSense(t, sendOverwrite(m, testNexus, 0, list), failed)
	checkSense(t, turFrom(m, testNexus), failed)
	checkSense(t, exec(m, cdb10(0x28, 0, 0, 1), nil, 512), failed)
	requireGood(t, run(m, testNexus, 0, []byte{0x12, 0, 0, 0, 36, 0}, nil, 36))
	c := run(m, testNexus, 0, []byte{0x03, 0, 0, 0, 18, 0}, nil, 18)
	requireGood(t, c)
	require.Equal(t, []byte{0x03, 0x31, 0x03}, []byte{data(c)[2], data(c)[12], data(c)[13]})
	checkSense(t, exec(m, sanitizeCDB(0x1F, 0), nil, 0), invalidCDB(1, 4))
	checkSense(t, sendOverwrite(m, testNexus, 0x20, list), invalidCDB(1, 5))

	f.Clear()
	checkGood(t, sendOverwrite(m, testNexus, 0, list))
	checkGood(t, turFrom(m, testNexus))

	f.Inject(faultstore.OpWrite, 0, 256*512, syscall.EIO)
	checkSense(t, sendOverwrite(m, testNexus, 0x20, list), failed)
	checkSense(t, turFrom(m, testNexus), failed)
	checkGood(t, exec(m, sanitizeCDB(0x1F, 0), nil, 0))
	checkGood(t, turFrom(m, testNexus))
	checkGood(t, exec(m, sanitizeCDB(0x1F, 0), nil, 0)) // nothing to exit
}

// TestSanitizeProtection: SANITIZE is refused from a write-protected mapping (DATA PROTECT) and
// under another initiator's reservation (RESERVATION CONFLICT), as libiscsi's
// Sanitize.ReadOnly and Sanitize.Reservations expect, without starting.
func TestSanitizeProtection(t *testing.T) {
	lu, _, mem := newMemLU(t, 64, 512, func(c *Config) { c.ThinProvisioning = true })
	writeMedium(t, mem, 0, testutil.Pattern(64*512, 4))
	ro, err := NewLUNMap([]Mapping{{LUN: 0, LU: lu, ReadOnly: true}})
	require.NoError(t, err)
	checkSense(t, run(ro, testNexus, 0, sanitizeCDB(0x02, 0), nil, 0), writeProtected)
	checkSense(t, sendOverwrite(ro, testNexus, 0, overwriteList(1, []byte{0})), writeProtected)

	m := newTestMap(t, lu)
	requireGood(t, run(m, otherNexus, 0, []byte{0x16, 0, 0, 0, 0, 0}, nil, 0)) // RESERVE(6)
	require.Equal(t, StatusReservationConflict, run(m, testNexus, 0, sanitizeCDB(0x02, 0), nil, 0).Status)
	require.Equal(t, testutil.Pattern(64*512, 4), readMedium(t, mem, 0, 64*512))
	require.Nil(t, lu.sanitizing.running.Load())
}

// TestNonBlockingFor: on a RAM logical unit the commands that can wait long whatever the store
// (EXTENDED COPY, SANITIZE) do not run where a goroutine must not block; other commands do.
func TestNonBlockingFor(t *testing.T) {
	lu, _, _ := newMemLU(t, 64, 512, nil)
	require.True(t, lu.NonBlockingFor(cdb10(0x28, 0, 0, 1)))
	require.True(t, lu.NonBlockingFor(writeAtomicCDB(0, 0, 0, 1)))
	require.False(t, lu.NonBlockingFor(xcopyCDB(0)))
	require.False(t, lu.NonBlockingFor(sanitizeCDB(0x01, 5)))
	require.False(t, lu.NonBlockingFor(sanitizeCDB(0x02, 0)))
	require.True(t, lu.NonBlockingFor([]byte{0xC5})) // unknown: answered at once
}

// TestSanitizeCopyTarget: while LUN 1 is being sanitized, an EXTENDED COPY to LUN 0 that names
// it as its destination ends in COPY ABORTED, SANITIZE IN PROGRESS, and LUN 0 can still be
// copied within.
func TestSanitizeCopyTarget(t *testing.T) {
	m, a, b, _, _ := copyPair(t, 64)
	b.sanitizing.running.Store(&sanitizeOp{done: make(chan struct{})}) // a sanitize in progress
	defer b.sanitizing.running.Store(nil)
	list := xcopyList(0, listIDNone, [][]byte{identCSCD(a), identCSCD(b)}, [][]byte{b2bSegment(0, 1, 8, 0, 0)})
	checkCopyAborted(t, sendXCopy(m, testNexus, 0, list), copyAbortedWant{0x04, 0x1B, 0, false, 48 + 4})
	checkGood(t, sendXCopy(m, testNexus, 0, xcopyList(0, listIDNone, [][]byte{identCSCD(a)}, [][]byte{b2bSegment(0, 0, 8, 0, 8)})))
}

// TestSanitizeStopsWhenRetired: a reload that retires the logical unit stops its sanitize at the
// next chunk (a replacement may serve the same backstore), and Retire waits for it.
func TestSanitizeStopsWhenRetired(t *testing.T) {
	lu, m, g := newGateLU(t, sanitizeBlocks, nil)
	open := g.Gate(256 * 512)
	checkGood(t, sendOverwrite(m, testNexus, 0x80, overwriteList(0x01, []byte{0x33})))
	g.RequireEntered(t, 256*512)
	retired := make(chan bool, 1)
	go func() {
		drained, _ := lu.Retire(t.Context())
		retired <- drained
	}()
	testutil.WaitFor(t, "Retire to begin", func() bool { return lu.retiring.Load() })
	open()
	require.True(t, <-retired, "the sanitize let the logical unit go")
	require.Equal(t, []string{"write 0", "write 131072"}, g.TakeOrder(), "the chunk it was in, none after")
}
