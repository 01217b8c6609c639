package srp_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// requestSense sends REQUEST SENSE (fixed format, 252 bytes) and returns key/ASC/ASCQ of the
// parameter data: the unit attention it reports and clears, or NO SENSE.
func requestSense(t *testing.T, ch *srptest.Channel, lun uint16) []uint8 {
	t.Helper()
	rsp, err := ch.Do(ctxT(t), &srptest.Request{LUN: lun, CDB: []byte{0x03, 0, 0, 0, 252, 0}, DataInLen: 252})
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.GreaterOrEqual(t, len(rsp.DataIn), 14)
	require.Equal(t, uint8(0x70), rsp.DataIn[0]&0x7F, "fixed format, current")
	return []uint8{rsp.DataIn[2] & 0x0F, rsp.DataIn[12], rsp.DataIn[13]}
}

// reportLUNs sends REPORT LUNS (SELECT REPORT 0) to LUN 0 and returns the LUN numbers.
func reportLUNs(t *testing.T, ch *srptest.Channel) []uint16 {
	t.Helper()
	rsp, err := ch.Do(ctxT(t), &srptest.Request{CDB: []byte{0xA0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, DataInLen: 4096})
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	d := rsp.DataIn
	require.GreaterOrEqual(t, len(d), 8)
	n := int(binary.BigEndian.Uint32(d)) / 8
	require.Equal(t, 8+8*n, len(d))
	luns := make([]uint16, 0, n)
	for i := 0; i < n; i++ {
		l, ok := scsi.DecodeLUN(binary.BigEndian.Uint64(d[8+8*i:]))
		require.True(t, ok)
		luns = append(luns, l)
	}
	return luns
}

// TestReloadWhileDisconnected: the configuration changes what an initiator sees while it is
// logged out (SetAuthorizer finds no live channel for its session and skips it). When it logs
// in again it must learn both that its nexus was lost and that its LUNs changed: I_T NEXUS
// LOSS OCCURRED first (the reset condition has the higher priority), then REPORTED LUNS DATA
// HAS CHANGED from REQUEST SENSE, then nothing; REPORT LUNS shows the new set. A reload that
// keeps the same mappings in a new map reports only the nexus loss.
func TestReloadWhileDisconnected(t *testing.T) {
	type mapping = scsi.Mapping
	changes := []struct {
		name          string
		before, after func(lus []*scsi.LogicalUnit) []mapping
		luns          []uint16 // REPORT LUNS after the reload
		changed       bool
	}{
		{"LUN added",
			func(l []*scsi.LogicalUnit) []mapping { return []mapping{{LUN: 0, LU: l[0]}} },
			func(l []*scsi.LogicalUnit) []mapping { return []mapping{{LUN: 0, LU: l[0]}, {LUN: 1, LU: l[1]}} },
			[]uint16{0, 1}, true},
		{"LUN removed",
			func(l []*scsi.LogicalUnit) []mapping { return []mapping{{LUN: 0, LU: l[0]}, {LUN: 1, LU: l[1]}} },
			func(l []*scsi.LogicalUnit) []mapping { return []mapping{{LUN: 0, LU: l[0]}} },
			[]uint16{0}, true},
		{"LUN mapped to another logical unit",
			func(l []*scsi.LogicalUnit) []mapping { return []mapping{{LUN: 0, LU: l[0]}, {LUN: 1, LU: l[1]}} },
			func(l []*scsi.LogicalUnit) []mapping { return []mapping{{LUN: 0, LU: l[0]}, {LUN: 1, LU: l[2]}} },
			[]uint16{0, 1}, true},
		{"read-only changed",
			func(l []*scsi.LogicalUnit) []mapping { return []mapping{{LUN: 0, LU: l[0]}} },
			func(l []*scsi.LogicalUnit) []mapping { return []mapping{{LUN: 0, LU: l[0], ReadOnly: true}} },
			[]uint16{0}, true},
		{"same mappings in a new map",
			func(l []*scsi.LogicalUnit) []mapping { return []mapping{{LUN: 0, LU: l[0]}, {LUN: 1, LU: l[1]}} },
			func(l []*scsi.LogicalUnit) []mapping { return []mapping{{LUN: 0, LU: l[0]}, {LUN: 1, LU: l[1]}} },
			[]uint16{0, 1}, false},
	}
	// How the initiator goes away: a DREQ (ib_srp's logout), SRP_I_LOGOUT, or vanishing with a
	// command outstanding (the target notices when it answers, as after a crash).
	leave := map[string]func(t *testing.T, h *harness, ch *srptest.Channel){
		"disconnect": func(t *testing.T, h *harness, ch *srptest.Channel) { require.NoError(t, ch.Close()) },
		"logout":     func(t *testing.T, h *harness, ch *srptest.Channel) { require.NoError(t, ch.Logout()) },
		"vanish": func(t *testing.T, h *harness, ch *srptest.Channel) {
			h.holdReads(t, ch, 0)
			ch.Vanish()
			h.gate.release()
		},
	}
	for _, tc := range changes {
		for how, goAway := range leave {
			t.Run(tc.name+"/"+how, func(t *testing.T) {
				h := newHarness(t, harnessOpts{luns: 3, lunSize: 1 << 20, gate: true})
				before, err := scsi.NewLUNMap(tc.before(h.lus))
				require.NoError(t, err)
				h.tgt.SetAuthorizer(srp.AllowAll(before))
				ch := h.login(h.cfg())
				clearUA(t, ch, 0)

				goAway(t, h, ch)
				h.waitStats("the channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 0 })
				require.Empty(t, h.tgt.Sessions(), "the session has no channel left")

				after, err := scsi.NewLUNMap(tc.after(h.lus))
				require.NoError(t, err)
				h.tgt.SetAuthorizer(srp.AllowAll(after))
				cfg := h.cfg()
				cfg.Node = ch.Node()
				again := h.login(cfg)

				requireTURSense(t, again, 0, []uint8{0x06, 0x29, 0x07}, "I_T NEXUS LOSS OCCURRED first")
				if tc.changed {
					require.Equal(t, []uint8{0x06, 0x3F, 0x0E}, requestSense(t, again, 0), "then REPORTED LUNS DATA HAS CHANGED")
					_, ok := h.logged("LUN map changed: REPORTED LUNS DATA HAS CHANGED pending")
					require.True(t, ok)
				}
				require.Equal(t, []uint8{0, 0, 0}, requestSense(t, again, 0), "nothing else pending")
				rsp, err := again.TestUnitReady(ctxT(t), 0)
				require.NoError(t, err)
				require.NoError(t, rsp.Err())
				require.Equal(t, tc.luns, reportLUNs(t, again))
				if tc.name == "read-only changed" {
					rsp, err := again.Write10(ctxT(t), 0, 0, make([]byte, testBlockSize), testBlockSize)
					require.NoError(t, err)
					k, asc, ascq := senseOf(t, rsp)
					require.Equal(t, []uint8{0x07, 0x27, 0x00}, []uint8{k, asc, ascq}, "the new map is in force")
				}
			})
		}
	}
}

// TestReloadUAOnNextCommand: after a reload while disconnected, the first command gets the
// nexus loss and the next command (not REQUEST SENSE) the changed LUN data, on the logical
// unit it addresses.
func TestReloadUAOnNextCommand(t *testing.T) {
	h := newHarness(t, harnessOpts{luns: 2, lunSize: 1 << 20})
	only0, err := scsi.NewLUNMap([]scsi.Mapping{{LUN: 0, LU: h.lus[0]}})
	require.NoError(t, err)
	h.tgt.SetAuthorizer(srp.AllowAll(only0))
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	require.NoError(t, ch.Close())
	h.waitStats("the channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 0 })
	h.tgt.SetAuthorizer(srp.AllowAll(h.lunMap))

	cfg := h.cfg()
	cfg.Node = ch.Node()
	again := h.login(cfg)
	for _, want := range [][]uint8{{0x06, 0x29, 0x07}, {0x06, 0x3F, 0x0E}} {
		rsp, err := again.Read10(ctxT(t), 0, 0, 1, testBlockSize)
		require.NoError(t, err)
		k, asc, ascq := senseOf(t, rsp)
		require.Equal(t, want, []uint8{k, asc, ascq})
	}
	mustRead(t, again, 0, 0, 1)
	// LUN 1 is new to this nexus: its logical unit reports its power-on condition first.
	rsp, err := again.TestUnitReady(ctxT(t), 1)
	require.NoError(t, err)
	k, asc, _ := senseOf(t, rsp)
	require.Equal(t, []uint8{0x06, 0x29}, []uint8{k, asc})
	require.Equal(t, []uint16{0, 1}, reportLUNs(t, again))
}

// TestReloadRacingLogin: a reload that lands between a login's authorization and the moment
// its channel joins the session is applied to that channel too (SetAuthorizer may have found
// the session without a channel).
func TestReloadRacingLogin(t *testing.T) {
	h := newHarness(t, harnessOpts{luns: 2, lunSize: 1 << 20})
	only0, err := scsi.NewLUNMap([]scsi.Mapping{{LUN: 0, LU: h.lus[0]}})
	require.NoError(t, err)
	entered, proceed := make(chan struct{}), make(chan struct{})
	first := true
	h.tgt.SetAuthorizer(srp.AuthorizerFunc(func(_, _ iu.PortID, _ netip.AddrPort) (*scsi.LUNMap, error) {
		if first {
			first = false
			close(entered)
			<-proceed
		}
		return only0, nil
	}))
	done := make(chan *srptest.Channel, 1)
	go func() {
		ch, err := h.loginErr(h.cfg())
		if err != nil {
			t.Error(err)
		}
		done <- ch
	}()
	<-entered
	h.tgt.SetAuthorizer(srp.AllowAll(h.lunMap)) // the login in progress has no channel yet
	close(proceed)
	var ch *srptest.Channel
	select {
	case ch = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("login did not finish")
	}
	require.NotNil(t, ch)
	require.Equal(t, []uint16{0, 1}, reportLUNs(t, ch), "the newer configuration wins")
}

// TestRetireAfterReloadWaitsForCommands: a reload removes LUN 0 while a read and a write are
// inside its logical unit. Retiring the unit waits for both, which complete GOOD (the read
// with the data written before); a command sent after the reload gets LOGICAL UNIT NOT
// SUPPORTED without touching the retiring unit. Before Hold/Retire the unit was closed at once
// and both commands failed with LOGICAL UNIT COMMUNICATION FAILURE, which Linux reports to
// the application as an I/O error.
func TestRetireAfterReloadWaitsForCommands(t *testing.T) {
	h := newHarness(t, harnessOpts{luns: 2, gate: true})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	clearUA(t, ch, 1)
	pattern := make([]byte, 4096)
	for i := range pattern {
		pattern[i] = byte(i*7 + 3)
	}
	rsp, err := ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBWrite10(0, 8), DataOut: pattern})
	require.NoError(t, err)
	require.NoError(t, rsp.Err())

	h.gate.hold()
	read, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(0, 8), DataInLen: 4096})
	require.NoError(t, err)
	write, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBWrite10(8, 8), DataOut: make([]byte, 4096)})
	require.NoError(t, err)
	testutil.WaitFor(t, "a read and a write in the backstore", func() bool { return h.gate.entered.Load() == 2 })

	// The reload: LUN 0 is gone from the new map, then its unit retires (the daemon's order).
	lu0 := h.lus[0]
	only1, err := scsi.NewLUNMap([]scsi.Mapping{{LUN: 1, LU: h.lus[1]}})
	require.NoError(t, err)
	h.tgt.SetAuthorizer(srp.AllowAll(only1))
	h.lus = h.lus[1:] // retired below: the harness must not close it again
	type result struct {
		drained bool
		err     error
	}
	retired := make(chan result, 1)
	go func() {
		d, err := lu0.Retire(ctxT(t))
		retired <- result{d, err}
	}()
	select {
	case <-retired:
		t.Fatal("the logical unit retired with two commands inside it")
	case <-time.After(50 * time.Millisecond):
	}
	require.EqualValues(t, 2, lu0.Holds())

	requireTURSense(t, ch, 0, []uint8{0x05, 0x25, 0x00}, "LOGICAL UNIT NOT SUPPORTED after the reload")
	require.EqualValues(t, 2, lu0.Holds(), "the command to the removed LUN held nothing")

	h.gate.release()
	rsp, err = read.Wait(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Equal(t, pattern, rsp.DataIn)
	rsp, err = write.Wait(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	select {
	case r := <-retired:
		require.True(t, r.drained)
		require.NoError(t, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("Retire did not return after the commands completed")
	}
	require.Zero(t, lu0.Holds())
	h.waitIdle()
}
