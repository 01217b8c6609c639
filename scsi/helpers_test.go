package scsi

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/gatestore"
)

// testNexus and otherNexus are two I_T nexuses through one target port.
var (
	testPort  = &TargetPort{Name: "0x0002c90300a0b0c10002c90300a0b0c1", RelativeID: 1, GroupID: 0}
	testNexus = &Nexus{InitiatorPort: "0x11111111111111110000000000000001", Port: testPort,
		InitiatorID: [16]byte{0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 15: 0x01}}
	otherNexus = &Nexus{InitiatorPort: "0x22222222222222220000000000000002", Port: testPort,
		InitiatorID: [16]byte{0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 15: 0x02}}
)

// newTestLU makes a logical unit over a memory backstore of blocks × blockSize bytes. mod may
// change the configuration before the logical unit is made.
func newTestLU(t testing.TB, blocks int64, blockSize uint32, mod func(*Config)) *LogicalUnit {
	t.Helper()
	bs, err := backstore.NewMemory(blocks*int64(blockSize), blockSize)
	require.NoError(t, err)
	return openLU(t, Config{Backstore: bs, Serial: "a1b2c3d4-0001", WriteCache: true}, mod)
}

// openLU makes a logical unit of cfg, changed by mod if not nil, and closes it when the test
// ends.
func openLU(t testing.TB, cfg Config, mod func(*Config)) *LogicalUnit {
	t.Helper()
	if mod != nil {
		mod(&cfg)
	}
	lu, err := NewLogicalUnit(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lu.Close() })
	return lu
}

// newMem64 is a memory backstore of 64 blocks of 512 bytes.
func newMem64(t testing.TB) *backstore.Memory {
	t.Helper()
	mem, err := backstore.NewMemory(64*512, 512)
	require.NoError(t, err)
	return mem
}

// newGateLU is newLUOver a gate over blocks of 512 bytes in memory: a test holds a command
// inside the backstore with the gate.
func newGateLU(t testing.TB, blocks int64, mod func(*Config)) (*LogicalUnit, *LUNMap, *gatestore.Store) {
	t.Helper()
	mem, err := backstore.NewMemory(blocks*512, 512)
	require.NoError(t, err)
	g := gatestore.New(mem)
	lu, m := newLUOver(t, g, mod)
	return lu, m, g
}

// forBlockSizes runs f, as a subtest named by the size, at each logical block size the block
// command tests cover: 512 and 4096 bytes.
func forBlockSizes(t *testing.T, f func(t *testing.T, bs int)) {
	t.Helper()
	for _, bs := range []int{512, 4096} {
		t.Run(fmt.Sprint(bs), func(t *testing.T) { f(t, bs) })
	}
}

// newTestMap maps lu at LUN 0.
func newTestMap(t testing.TB, lu *LogicalUnit) *LUNMap {
	t.Helper()
	m, err := NewLUNMap([]Mapping{{LUN: 0, LU: lu}})
	require.NoError(t, err)
	return m
}

// run executes cdb on LUN lun of m from nexus n with dataOut and a data-in buffer of inLen bytes
// and returns the command.
func run(m *LUNMap, n *Nexus, lun uint16, cdb []byte, dataOut []byte, inLen int) *Command {
	c := &Command{Nexus: n, LUN: EncodeLUN(lun), CDB: cdb, DataOut: dataOut, DataIn: make([]byte, inLen)}
	m.Execute(c)
	return c
}

// clearPowerOnUA consumes the POWER ON/RESET unit attention every nexus sees first, so that a
// test can look at the command it cares about.
func clearPowerOnUA(t testing.TB, m *LUNMap, n *Nexus) {
	t.Helper()
	c := run(m, n, 0, make([]byte, 6), nil, 0) // TEST UNIT READY
	require.Equal(t, StatusCheckCondition, c.Status)
	s, ok := ParseSense(c.SenseData())
	require.True(t, ok)
	require.Equal(t, SenseUnitAttention, s.Key)
	require.Equal(t, byte(0x29), s.ASC)
	c = run(m, n, 0, make([]byte, 6), nil, 0)
	require.Equal(t, StatusGood, c.Status)
}

// requireSense checks that c ended in CHECK CONDITION with reason's sense key and codes and
// returns the parsed sense data.
func requireSense(t testing.TB, c *Command, reason Reason) ParsedSense {
	t.Helper()
	testutil.RequireSense(t, uint8(c.Status), c.SenseData(), uint8(reason.Key()), reason.ASC(), reason.ASCQ())
	s, ok := ParseSense(c.SenseData())
	require.True(t, ok, "sense data % x", c.SenseData())
	return s
}
