package daemon

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/srp/srptest"
)

// TestPhysicalBlockSizeReachesTheLU: luns[].physical_block_size becomes the LOGICAL BLOCKS PER
// PHYSICAL BLOCK EXPONENT an initiator reads in READ CAPACITY(16), and a reload that changes it
// makes a new logical unit over the same memory, keeping the data.
func TestPhysicalBlockSizeReachesTheLU(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	e.start()
	ch := e.LoginRW()
	exponent := func() byte {
		rsp := daemontest.Do(t, ch, &srptest.Request{LUN: 0, CDB: []byte{0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, DataInLen: 32})
		require.NoError(t, rsp.Err())
		return rsp.DataIn[13] & 0x0F
	}
	require.Equal(t, byte(0), exponent())
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i * 7)
	}
	daemontest.Write10(t, ch, 0, 0, data, 512)

	e.reloadNewLU0("physical_block_size: 4096")
	require.Equal(t, uint32(4096), e.d.luns[0].lu.PhysicalBlockSize())
	daemontest.ClearUA(t, ch, 0)
	require.Equal(t, byte(3), exponent(), "4096 / 512 = 2^3")
	require.Equal(t, data, daemontest.Read10(t, ch, 0, 0, 8, 512))
	require.NoError(t, e.Stop(syscall.SIGINT))
}
