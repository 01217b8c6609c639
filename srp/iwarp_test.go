package srp_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/srptest"
)

// iwarpFabric models siw: RDMA READ sinks need remote write, one SGE per RDMA READ.
func iwarpFabric() memfabric.Options {
	lim := memfabric.DefaultLimits
	lim.MaxReadSGE = 1
	return memfabric.Options{IWARP: true, Limits: lim}
}

// TestIWARPReadSinks: on iWARP the data buffer pool must be registered with remote write
// (Limits.RemoteWriteForReadSinks), or every data-out fetched by RDMA READ fails and the channel
// goes down; immediate data needs no RDMA READ and works either way. With the option, writes
// in every layout (including an external descriptor table, also an RDMA READ sink) land intact.
func TestIWARPReadSinks(t *testing.T) {
	t.Run("without RemoteWriteForReadSinks", func(t *testing.T) {
		h := newHarness(t, harnessOpts{fabric: iwarpFabric()})
		ch := h.login(h.cfg())
		clearUA(t, ch, 0)
		data := testutil.Pattern(4096, 1)
		mustWrite(t, ch, 0, 0, data) // immediate data

		_, err := ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBWrite10(8, 8), DataOut: data, Layout: srptest.Direct{}})
		require.ErrorIs(t, err, srptest.ErrDisconnected)
		h.waitStats("the channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 0 })
		e, ok := h.logged("work request failed: closing the channel")
		require.True(t, ok)
		require.Equal(t, "RDMA READ of data-out", e.ContextMap()["operation"])
		require.Equal(t, "local protection error", e.ContextMap()["status"])
		h.waitIdle()
	})
	t.Run("with RemoteWriteForReadSinks", func(t *testing.T) {
		h := newHarness(t, harnessOpts{fabric: iwarpFabric(), limits: srp.Limits{RemoteWriteForReadSinks: true}})
		cfg := h.cfg()
		cfg.AllowExtSG = true
		ch := h.login(cfg)
		clearUA(t, ch, 0)
		for i, layout := range []srptest.Layout{nil, srptest.Direct{}, srptest.Indirect{N: 5}, srptest.External{N: 40}} {
			data := testutil.Pattern(64<<10, 10+i)
			lba := uint32(256 * i)
			rsp, err := ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBWrite10(lba, 128), DataOut: data, Layout: layout})
			require.NoError(t, err)
			require.NoError(t, rsp.Err(), "write, layout %T", layout)
			rsp, err = ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(lba, 128), DataInLen: len(data), Layout: layout})
			require.NoError(t, err)
			require.NoError(t, rsp.Err(), "read, layout %T", layout)
			require.Equal(t, data, rsp.DataIn, "layout %T", layout)
		}
		require.Zero(t, h.tgt.Stats().RDMAErrors)
		e, ok := h.logged("registered data buffer pool")
		require.True(t, ok)
		require.Equal(t, true, e.ContextMap()["remote_write"])
	})
}
