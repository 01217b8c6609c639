package scsi

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
)

// fuzzMap makes a small thin-provisioned memory LU mapped at LUN 0, and read-only at LUN 1.
func fuzzMap(t testing.TB) (*LogicalUnit, *LUNMap) {
	t.Helper()
	bs, err := backstore.NewMemory(2048*512, 512)
	require.NoError(t, err)
	lu, err := NewLogicalUnit(Config{Backstore: bs, Serial: "f00d-0001", WriteCache: true, ThinProvisioning: true,
		MaxTransferBytes: 64 << 10})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lu.Close() })
	m, err := NewLUNMap([]Mapping{{LUN: 0, LU: lu}, {LUN: 1, LU: lu, ReadOnly: true}})
	require.NoError(t, err)
	return lu, m
}

// checkResult checks the invariants every completed command keeps, whatever its CDB.
func checkResult(t *testing.T, c *Command) {
	t.Helper()
	switch c.Status {
	case StatusGood, StatusConditionMet:
		require.Zero(t, c.SenseLength, "sense with %v", c.Status)
	case StatusCheckCondition:
		require.Positive(t, c.SenseLength)
		require.LessOrEqual(t, c.SenseLength, MaxSenseLength)
		s, ok := ParseSense(c.SenseData())
		require.True(t, ok, "sense % x", c.SenseData())
		require.NotEqual(t, SenseNoSense, s.Key, "CHECK CONDITION with NO SENSE")
		if s.FieldPointerValid && s.InCDB {
			require.Less(t, int(s.FieldPointer), len(c.CDB), "field pointer beyond the CDB")
		}
		require.Zero(t, c.DataInLength, "data with CHECK CONDITION")
	default:
		t.Fatalf("status %v", c.Status)
	}
	require.GreaterOrEqual(t, c.DataInLength, 0)
	require.LessOrEqual(t, c.DataInLength, len(c.DataIn))
	require.GreaterOrEqual(t, c.TransferLength, 0)
	require.LessOrEqual(t, c.DataInLength, c.TransferLength, "more data than the CDB asked for")
}

// FuzzCDB runs any CDB of 6 to 32 bytes, with any data-out and data-in buffer, on a LUN map
// with a memory LU, through the LU, a read-only mapping, an unmapped LUN and the REPORT LUNS
// well-known LUN, from a target port without ALUA or in one of the ALUA states.
func FuzzCDB(f *testing.F) {
	seeds := [][]byte{
		{0x00, 0, 0, 0, 0, 0},
		{0x03, 0x01, 0, 0, 0xFF, 0},
		{0x12, 0, 0, 0, 0xFF, 0},
		{0x12, 0x01, 0x83, 0, 0xFF, 0},
		{0x12, 0x01, 0xB0, 0, 0x04, 0},
		{0x15, 0x10, 0, 0, 0x18, 0},
		{0x1A, 0x08, 0x3F, 0xFF, 0xFF, 0},
		{0x1E, 0, 0, 0, 1, 0},
		{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		{0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0},
		{0x2A, 0x08, 0, 0, 0, 1, 0, 0, 1, 0},
		{0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		{0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0},
		{0x55, 0x10, 0, 0, 0, 0, 0, 0, 0x1C, 0},
		{0x5A, 0x18, 0x08, 0, 0, 0, 0, 0x02, 0, 0},
		{0x89, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
		{0x93, 0x08, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0},
		{0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0},
		{0x9E, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 40, 0, 0},
		{0x34, 0x02, 0, 0, 0, 0, 0, 0, 8, 0},
		{0x37, 0, 0x18, 0, 0, 0, 0, 0, 4, 0},
		{0xB7, 0x1B, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0},
		{0xA0, 0, 2, 0, 0, 0, 0, 0, 0x10, 0, 0, 0},
		{0xA3, 0x0C, 0x83, 0x9E, 0, 0x10, 0, 0, 0x10, 0, 0, 0},
		{0xA3, 0x0C, 0x80, 0, 0, 0, 0, 0, 0x10, 0, 0, 0},
		{0xA3, 0x0D, 0x80, 0, 0, 0, 0, 0, 0, 16, 0, 0},
		{0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0},
		{0xA3, 0x2A, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0},
		{0x7F, 0, 0, 0, 0, 0, 0, 0x18, 0, 0x0D, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	}
	for i, s := range seeds {
		f.Add(s, uint8(i%5), []byte{}, uint16(512), true)
		f.Add(s, uint8(i%3), make([]byte, 512), uint16(7), false)
		f.Add(s, uint8(i%5)|0x40, []byte{}, uint16(512), true) // through an ALUA standby port
		f.Add(s, uint8(i%5)|0xC0, []byte{}, uint16(64), false) // through an ALUA active port
	}
	f.Fuzz(func(t *testing.T, cdb []byte, sel uint8, dataOut []byte, inLen uint16, clearUA bool) {
		if len(cdb) < 6 || len(cdb) > 32 {
			return
		}
		_, m := fuzzMap(t)
		// The two high bits of sel pick the target port: without ALUA, or an ALUA port in
		// standby, unavailable or active/optimized.
		nexus := testNexus
		if k := sel >> 6; k > 0 {
			states := [...]AccessState{Standby, Unavailable, ActiveOptimized}
			a, err := NewALUA([]PortGroup{{ID: 1, State: states[k-1], Ports: []uint16{1}}, {ID: 2, Ports: []uint16{9}}})
			require.NoError(t, err)
			nexus = &Nexus{InitiatorPort: "fuzz", Port: &TargetPort{RelativeID: 1, ALUA: a}}
		}
		if clearUA {
			run(m, nexus, 0, []byte{0x00, 0, 0, 0, 0, 0}, nil, 0)
		}
		luns := [...]uint64{EncodeLUN(0), EncodeLUN(1), EncodeLUN(2), ReportLUNsWellKnownLUN, 0x4000000000000000}
		c := &Command{
			Nexus:   nexus,
			LUN:     luns[int(sel)%len(luns)],
			Attr:    TaskAttribute(sel>>4) % 4,
			CDB:     cdb,
			DataOut: dataOut,
			DataIn:  make([]byte, inLen),
		}
		done := make(chan struct{})
		go func() {
			m.Execute(c)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("command % x on LUN %016x did not complete", cdb, c.LUN)
		}
		checkResult(t, c)
	})
}

// FuzzModeSelect sends any parameter list with MODE SELECT(6) or (10). Through the read-only
// mapping it is refused with WRITE PROTECTED and changes nothing. A list that is refused
// changes nothing and establishes no unit attention; one that is accepted can be read back with
// MODE SENSE and sent again unchanged; only a change establishes MODE PARAMETERS CHANGED, for the
// other nexus.
func FuzzModeSelect(f *testing.F) {
	f.Add(false, uint16(24), cat([]byte{0, 0, 0, 0}, cachingNoWCE))
	f.Add(true, uint16(36), cat([]byte{0, 0, 0, 0, 0, 0, 0, 8}, shortBD, controlDSensePage))
	f.Add(true, uint16(44), cat([]byte{0, 0, 0, 0, 1, 0, 0, 16}, longBD, cachingCurrent))
	f.Add(false, uint16(48), cat([]byte{0, 0, 0, 0}, cachingCurrent, controlCurrent, iecCurrent))
	f.Add(false, uint16(12), cat([]byte{0, 0, 0, 8}, zeros(8)))
	f.Add(false, uint16(30), cat([]byte{0, 0, 0, 0}, []byte{0x08, 0x12}))
	f.Fuzz(func(t *testing.T, ten bool, plen uint16, param []byte) {
		lu, m := fuzzMap(t)
		clearPowerOnUA(t, m, testNexus)
		clearPowerOnUA(t, m, otherNexus)
		before := lu.mode.current()

		cdb := []byte{0x15, 0x10, 0, 0, byte(plen), 0}
		if ten {
			cdb = []byte{0x55, 0x10, 0, 0, 0, 0, 0, byte(plen >> 8), byte(plen), 0}
		}
		c := run(m, testNexus, 1, cdb, param, 0)
		checkResult(t, c)
		requireSense(t, c, ReasonWriteProtected)
		require.Equal(t, before, lu.mode.current(), "MODE SELECT through the read-only mapping changed something")
		require.Equal(t, ReasonNone, lu.PendingUA(otherNexus))

		c = run(m, testNexus, 0, cdb, param, 0)
		checkResult(t, c)
		after := lu.mode.current()
		require.Equal(t, before.qam, after.qam, "QUEUE ALGORITHM MODIFIER is not changeable")
		if c.Status != StatusGood {
			s, _ := ParseSense(c.SenseData())
			require.Equal(t, SenseIllegalRequest, s.Key)
			require.Contains(t, []uint8{0x1A, 0x24, 0x26}, s.ASC)
			require.Equal(t, before, after, "a refused MODE SELECT changed something")
			require.Equal(t, ReasonNone, lu.PendingUA(otherNexus))
			return
		}
		if before == after {
			require.Equal(t, ReasonNone, lu.PendingUA(otherNexus))
		} else {
			require.Equal(t, ReasonModeParametersChanged, lu.PendingUA(otherNexus))
		}
		require.Equal(t, ReasonNone, lu.PendingUA(testNexus))

		// What MODE SENSE reports now goes back through MODE SELECT unchanged.
		c = run(m, testNexus, 0, []byte{0x5A, 0x00, 0x3F, 0, 0, 0, 0, 0x02, 0, 0}, nil, 512)
		requireGood(t, c)
		back := data(c)
		binary.BigEndian.PutUint16(back[0:2], 0) // MODE DATA LENGTH is reserved in MODE SELECT
		c = run(m, testNexus, 0, []byte{0x55, 0x10, 0, 0, 0, 0, 0, 0, byte(len(back)), 0}, back, 0)
		requireGood(t, c)
		require.Equal(t, after, lu.mode.current())
	})
}
