package srp_test

import (
	"context"
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

// Initiator port identifiers of the read-write and the read-only initiator of the tests below.
var (
	rwInitiator = iu.PortID{15: 0x01}
	roInitiator = iu.PortID{15: 0x02}
)

// readOnlyPair logs in two initiators that share LUN 0 of h (a gated harness): one through a
// read-write mapping, the other through a read-only mapping, each with its POWER ON unit
// attention consumed.
func readOnlyPair(t *testing.T, h *harness) (rw, ro *srptest.Channel) {
	t.Helper()
	roMap, err := scsi.NewLUNMap([]scsi.Mapping{{LUN: 0, LU: h.lus[0], ReadOnly: true}})
	require.NoError(t, err)
	h.tgt.SetAuthorizer(srp.AuthorizerFunc(func(initiator, _ iu.PortID, _ netip.AddrPort) (*scsi.LUNMap, error) {
		if initiator == roInitiator {
			return roMap, nil
		}
		return h.lunMap, nil
	}))
	cfg := h.cfg()
	cfg.InitiatorPortID = rwInitiator
	rw = h.login(cfg)
	cfg.InitiatorPortID = roInitiator
	ro = h.login(cfg)
	clearUA(t, rw, 0)
	clearUA(t, ro, 0)
	return rw, ro
}

// requireNoResponse checks that an aborted command got no response, and forgets it.
func requireNoResponse(t *testing.T, p *srptest.Pending) {
	t.Helper()
	select {
	case <-p.Done():
		t.Fatal("an aborted command got a response")
	default:
	}
	p.Forget()
}

// requireTUR checks the next TEST UNIT READY of ch on LUN 0: the unit attention want
// (key/ASC/ASCQ) first when want is non-nil, then GOOD.
func requireTUR(t *testing.T, ch *srptest.Channel, want []uint8) {
	t.Helper()
	rsp, err := ch.TestUnitReady(ctxT(t), 0)
	require.NoError(t, err)
	if want != nil {
		k, asc, ascq := senseOf(t, rsp)
		require.Equal(t, want, []uint8{k, asc, ascq})
		rsp, err = ch.TestUnitReady(ctxT(t), 0)
		require.NoError(t, err)
	}
	require.NoError(t, rsp.Err())
}

// TestReadOnlyTaskManagement: CLEAR TASK SET and LOGICAL UNIT RESET from an initiator with a
// read-only mapping abort its own commands only. A read-write initiator's command in the
// logical unit completes GOOD with its data, whether or not the read-only initiator had a
// command of its own to abort, and gets no unit attention; the read-only initiator's own
// command ends without a response. The read-write initiator's own LUN reset still aborts
// every command, the read-only initiator's too.
func TestReadOnlyTaskManagement(t *testing.T) {
	busDeviceReset := []uint8{0x06, 0x29, 0x03}
	for _, tc := range []struct {
		fn iu.TskMgmtFunc
		ua []uint8 // what the read-only initiator sees after its own function
	}{
		{iu.TskClearTaskSet, nil},
		{iu.TskLUNReset, busDeviceReset},
	} {
		t.Run(tc.fn.String(), func(t *testing.T) {
			h := newHarness(t, harnessOpts{gate: true})
			rw, ro := readOnlyPair(t, h)
			data := testutil.Pattern(4096, 11)
			mustWrite(t, rw, 0, 0, data)
			readRW := func() *srptest.Pending {
				t.Helper()
				p, err := rw.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(0, 8), DataInLen: 4096})
				require.NoError(t, err)
				return p
			}
			requireRead := func(p *srptest.Pending) {
				t.Helper()
				rsp, err := p.Wait(ctxT(t))
				require.NoError(t, err)
				require.NoError(t, rsp.Err())
				require.Equal(t, data, rsp.DataIn)
			}
			// A function that waited for the read-write initiator's command, held at the
			// gate, would not be answered before this.
			tmf := func(ch *srptest.Channel) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				code, err := ch.TaskMgmt(ctx, tc.fn, 0, 0)
				require.NoError(t, err)
				require.Equal(t, uint8(iu.TskMgmtSuccess), code)
			}

			// The read-only initiator has nothing to abort: the function is answered while
			// the read-write initiator's command is still in the logical unit.
			h.gate.hold()
			p := readRW()
			testutil.WaitFor(t, "the read-write initiator's read in the backstore", func() bool { return h.gate.entered.Load() == 1 })
			tmf(ro)
			select {
			case <-p.Done():
				t.Fatal("the read-write initiator's command ended while held in the backstore")
			default:
			}
			h.gate.release()
			requireRead(p)
			require.Zero(t, h.tgt.Stats().Aborted)
			requireTUR(t, rw, nil)
			requireTUR(t, ro, tc.ua)

			// With a command of its own in the logical unit, the function aborts that one
			// only.
			h.gate.hold()
			p = readRW()
			own, err := ro.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(8, 8), DataInLen: 4096})
			require.NoError(t, err)
			testutil.WaitFor(t, "both reads in the backstore", func() bool { return h.gate.entered.Load() == 2 })
			time.AfterFunc(50*time.Millisecond, h.gate.release)
			tmf(ro)
			requireRead(p)
			require.Equal(t, uint64(1), h.tgt.Stats().Aborted)
			requireNoResponse(t, own)
			requireTUR(t, rw, nil)
			requireTUR(t, ro, tc.ua)

			// The read-write initiator's LUN reset aborts everything and resets everyone.
			h.gate.hold()
			p = readRW()
			own, err = ro.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(8, 8), DataInLen: 4096})
			require.NoError(t, err)
			testutil.WaitFor(t, "both reads in the backstore", func() bool { return h.gate.entered.Load() == 2 })
			time.AfterFunc(50*time.Millisecond, h.gate.release)
			code, err := rw.ResetLUN(ctxT(t), 0)
			require.NoError(t, err)
			require.Equal(t, uint8(iu.TskMgmtSuccess), code)
			require.Equal(t, uint64(3), h.tgt.Stats().Aborted)
			requireTUR(t, ro, busDeviceReset)
			requireTUR(t, rw, busDeviceReset)
			requireNoResponse(t, p)
			requireNoResponse(t, own)
			for _, ch := range []*srptest.Channel{rw, ro} {
				require.Equal(t, int64(128), ch.Credits())
				require.Zero(t, ch.Stats().UnknownTags, "a response for an aborted command was sent")
			}
			h.waitIdle()
		})
	}
}

// TestReadOnlyModeSelect is review F5 over the wire: MODE SELECT(10) turning the write cache off,
// from the read-only initiator, is refused with DATA PROTECT, WRITE PROTECTED, and the
// read-write initiator still sees WCE set and no MODE PARAMETERS CHANGED.
func TestReadOnlyModeSelect(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true})
	rw, ro := readOnlyPair(t, h)
	param := make([]byte, 8+20)
	param[8], param[9] = 0x08, 0x12 // caching mode page, WCE 0
	modeSelect10 := []byte{0x55, 0x10, 0, 0, 0, 0, 0, 0, byte(len(param)), 0}
	rsp, err := ro.Do(ctxT(t), &srptest.Request{CDB: modeSelect10, DataOut: param})
	require.NoError(t, err)
	k, asc, ascq := senseOf(t, rsp)
	require.Equal(t, []uint8{0x07, 0x27, 0x00}, []uint8{k, asc, ascq})

	modeSense6 := []byte{0x1A, 0x08, 0x08, 0, 24, 0} // DBD, caching page
	rsp, err = rw.Do(ctxT(t), &srptest.Request{CDB: modeSense6, DataInLen: 24})
	require.NoError(t, err)
	require.NoError(t, rsp.Err(), "a unit attention here would be MODE PARAMETERS CHANGED")
	require.Len(t, rsp.DataIn, 24)
	require.Equal(t, uint8(0x04), rsp.DataIn[4+2]&0x04, "WCE")

	// The read-write initiator may change it.
	rsp, err = rw.Do(ctxT(t), &srptest.Request{CDB: modeSelect10, DataOut: param})
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	rsp, err = ro.Do(ctxT(t), &srptest.Request{CDB: modeSense6, DataInLen: 24})
	require.NoError(t, err)
	k, asc, ascq = senseOf(t, rsp)
	require.Equal(t, []uint8{0x06, 0x2A, 0x01}, []uint8{k, asc, ascq}, "MODE PARAMETERS CHANGED")
}
