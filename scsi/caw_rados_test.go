//go:build rbd

package scsi

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/backstore/rbd"
)

// TestCompareAndWriteAcrossGatewaysRADOS: two device servers, each with its own librbd client
// of one image, race COMPARE AND WRITE on one block, as two ESXi hosts' atomic test and set on
// a VMFS lock through two gateways: every round both compare with the block's current content
// and write their own, and exactly one must win (GOOD), the other see MISCOMPARE, and the block
// must hold the winner's data. A compare made under each gateway's own range lock would let
// both win.
func TestCompareAndWriteAcrossGatewaysRADOS(t *testing.T) {
	conf, pool := os.Getenv("SRPT_RBD_CONF"), os.Getenv("SRPT_RBD_POOL")
	if conf == "" || pool == "" {
		t.Skip("no Ceph cluster: SRPT_RBD_CONF and SRPT_RBD_POOL are not set (make test-rbd starts one)")
	}
	conn, err := rbd.Connect(rbd.Options{ConfFile: conf, MountTimeout: 10 * time.Second, OSDOpTimeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	image := fmt.Sprintf("caw-%d", os.Getpid())
	require.NoError(t, conn.CreateImage(pool, "", image, 1<<20))
	t.Cleanup(func() { require.NoError(t, conn.RemoveImage(pool, "", image)) }) // after the units close

	var maps [2]*LUNMap
	nexuses := [2]*Nexus{prNexusA1, prNexusB2}
	for i := range maps {
		b, err := backstore.OpenRBD(backstore.RBDOptions{Pool: pool, Image: image, ConfFile: conf, OSDOpTimeout: 10 * time.Second})
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
