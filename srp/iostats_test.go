package srp_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
)

// TestSessionIOStats: each session counts, per LUN, the commands answered, the bytes read and
// written, the CHECK CONDITIONs and its last activity; two initiators doing different I/O get
// their own counts, which stay after the initiator logs out; a LUN a reload takes away keeps
// its counts.
func TestSessionIOStats(t *testing.T) {
	lu0, _, both := faultyAndIdleLUs(t, "io0", "io1")

	h := newHarness(t, harnessOpts{auth: srp.AllowAll(both)})
	acfg := h.cfg()
	acfg.InitiatorPortID[15] = 0xaa
	a := h.login(acfg)
	bcfg := h.cfg()
	bcfg.InitiatorPortID[15] = 0xbb
	b := h.login(bcfg)
	ctx := ctxT(t)
	start := time.Now()
	clearUA(t, a, 0)
	clearUA(t, a, 1)
	clearUA(t, b, 1)

	const blocks = 8
	for i := range 3 {
		mustWrite(t, a, 0, uint32(i*blocks), testutil.Pattern(blocks*testBlockSize, i))
	}
	for i := range 5 {
		mustRead(t, a, 1, uint32(i*blocks), blocks)
	}
	rsp, err := a.Read10(ctx, 0, badLBA, 1, testBlockSize) // MEDIUM ERROR
	require.NoError(t, err)
	require.Error(t, rsp.Err())
	for range 2 {
		mustRead(t, b, 1, 0, 2*blocks)
	}

	// clearUA's TEST UNIT READYs count too: the unit attention (CHECK CONDITION), then GOOD.
	byInitiator := map[byte]srp.SessionIOInfo{}
	testutil.WaitFor(t, "the counts", func() bool {
		for _, s := range h.tgt.SessionIO() {
			byInitiator[s.InitiatorPortID[15]] = s
		}
		return len(byInitiator) == 2 && byInitiator[0xbb].IO[1].Commands == 4 && byInitiator[0xaa].IO[0].Commands == 6
	})
	sa, sb := byInitiator[0xaa], byInitiator[0xbb]
	require.Len(t, sa.IO, 2)
	want := []struct {
		commands, errors, read, written uint64
	}{
		{2 + 3 + 1, 1 + 1, 0, 3 * blocks * testBlockSize}, // clearUA, 3 writes, the bad read
		{2 + 5, 1, 5 * blocks * testBlockSize, 0},
	}
	for lun, w := range want {
		got := sa.IO[lun]
		require.Equal(t, uint16(lun), got.LUN)
		require.Equal(t, w.commands, got.Commands, "LUN %d", lun)
		require.Equal(t, w.errors, got.Errors, "LUN %d", lun)
		require.Equal(t, w.read, got.ReadBytes, "LUN %d", lun)
		require.Equal(t, w.written, got.WrittenBytes, "LUN %d", lun)
		require.False(t, got.LastActive.Before(start.Truncate(time.Second)), "LUN %d: %v", lun, got.LastActive)
		require.False(t, got.LastActive.After(time.Now()))
	}
	require.Equal(t, uint64(2+2), sb.IO[1].Commands)
	require.Equal(t, uint64(2*2*blocks*testBlockSize), sb.IO[1].ReadBytes)
	require.Zero(t, sb.IO[0].Commands)
	require.True(t, sb.IO[0].LastActive.IsZero(), "no command on LUN 0: no activity")

	ss := h.tgt.Sessions()
	require.Len(t, ss, 2)
	total := ss[0].Total()
	require.Equal(t, uint64(6+7), total.Commands)

	// A reload that takes LUN 1 away from everyone: its counts stay.
	only0, err := scsi.NewLUNMap([]scsi.Mapping{{LUN: 0, LU: lu0}})
	require.NoError(t, err)
	h.tgt.SetAuthorizer(srp.AllowAll(only0))
	rsp, err = a.Read10(ctx, 0, 0, 1, testBlockSize)
	require.NoError(t, err)
	_ = rsp
	// Logged out: still counted.
	require.NoError(t, b.Close())
	testutil.WaitFor(t, "b's channel to close", func() bool { return len(h.tgt.Sessions()) == 1 })
	after := h.tgt.SessionIO()
	require.Len(t, after, 2, "a session without channels keeps its counters")
	for _, s := range after {
		if s.InitiatorPortID[15] == 0xbb {
			require.Equal(t, uint64(4), s.IO[1].Commands)
		} else {
			require.Equal(t, uint64(7), s.IO[1].Commands, "LUN 1, taken away, keeps its counts")
		}
	}
}
