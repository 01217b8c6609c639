package scsi

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil/cephtest"
)

// TestCompareAndWriteAcrossGatewaysRADOS: two device servers, each with its own librbd client
// of one image, race COMPARE AND WRITE on one block, as two ESXi hosts' atomic test and set on
// a VMFS lock through two gateways: every round both compare with the block's current content
// and write their own, and exactly one must win (GOOD), the other see MISCOMPARE, and the block
// must hold the winner's data. A compare made under each gateway's own range lock would let
// both win.
func TestCompareAndWriteAcrossGatewaysRADOS(t *testing.T) {
	img := cephtest.Image(t, "caw", 1<<20) // removed after the units close

	var maps [2]*LUNMap
	nexuses := [2]*Nexus{prNexusA1, prNexusB2}
	for i := range maps {
		b, err := backstore.OpenRBD(img, 0, false)
		require.NoError(t, err)
		var lu *LogicalUnit
		lu, maps[i] = newLUOver(t, b, nil)
		require.Equal(t, uint8(1), lu.maxCompareAndWriteBlocks(), "librbd's one sector")
		clearPowerOnUA(t, maps[i], nexuses[i])
	}
	block := func(round, who int) []byte {
		b := make([]byte, 512)
		binary.BigEndian.PutUint64(b, uint64(round))
		b[8] = byte(who)
		return b
	}
	cur := make([]byte, 512) // the image is zero
	const rounds = 100
	for round := 1; round <= rounds; round++ {
		var wg sync.WaitGroup
		var status [2]Status
		for i := range maps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := exec2(maps[i], nexuses[i], cawCDB(0, 3, 1), cat(cur, block(round, i)))
				status[i] = c.Status
				if c.Status != StatusGood {
					requireSense(t, c, ReasonMiscompareDuringVerify)
				}
			}()
		}
		wg.Wait()
		wins := 0
		for i := range status {
			if status[i] == StatusGood {
				wins++
				cur = block(round, i)
			}
		}
		require.Equal(t, 1, wins, "round %d: %v", round, status)
		got := make([]byte, 512)
		c := run(maps[round%2], nexuses[round%2], 0, cdb10(0x28, 0, 3, 1), nil, 512)
		requireGood(t, c)
		copy(got, data(c))
		require.Equal(t, cur, got, "round %d: the winner's block", round)
	}
}

// exec2 runs cdb with data-out from nexus n.
func exec2(m *LUNMap, n *Nexus, cdb, out []byte) *Command {
	return run(m, n, 0, cdb, out, 0)
}
