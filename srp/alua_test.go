package srp_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/srptest"
)

// TestTwoTargetPortsALUA logs one initiator in to two SRP target ports of one target, each a SCSI
// target port in its own target port group, and checks that each nexus sees its own port in VPD
// page 0x83, the same REPORT TARGET PORT GROUPS, and its group's access state.
func TestTwoTargetPortsALUA(t *testing.T) {
	a, err := scsi.NewALUA([]scsi.PortGroup{
		{ID: 10, State: scsi.ActiveOptimized, Ports: []uint16{1}},
		{ID: 20, State: scsi.Standby, Ports: []uint16{2}},
	})
	require.NoError(t, err)
	second := testPortID
	second[7] ^= 0x01 // another id_ext
	h := newHarness(t, harnessOpts{
		targetPort: &scsi.TargetPort{Name: "a", RelativeID: 1, ALUA: a},
		morePorts:  []srp.Port{{ID: second, SCSI: &scsi.TargetPort{Name: "b", RelativeID: 2, ALUA: a}}},
	})
	chA := h.login(h.cfg())
	cfgB := h.cfg()
	cfgB.TargetPortID = second
	chB := h.login(cfgB)
	clearUA(t, chA, 0)
	// Through the standby port the unit attention comes first, then NOT READY, LOGICAL UNIT
	// NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE.
	for _, want := range [][3]uint8{{0x06, 0x29, 0x00}, {0x02, 0x04, 0x0B}} {
		rsp, err := chB.TestUnitReady(ctxT(t), 0)
		require.NoError(t, err)
		k, a, q := senseOf(t, rsp)
		require.Equal(t, want, [3]uint8{k, a, q})
	}

	rtpg := []byte{0xA3, 0x2A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}
	for _, tc := range []struct {
		ch         *srptest.Channel
		rel, group uint16
		readOK     bool
	}{{chA, 1, 10, true}, {chB, 2, 20, false}} {
		rsp, err := tc.ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBInquiry(true, 0x83, 512), DataInLen: 512})
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
		d := rsp.DataIn
		var rel, group uint16
		for off := 4; off+4 <= len(d); off += 4 + int(d[off+3]) {
			switch d[off+1] {
			case 0x14:
				rel = binary.BigEndian.Uint16(d[off+6:])
			case 0x15:
				group = binary.BigEndian.Uint16(d[off+6:])
			}
		}
		require.Equal(t, tc.rel, rel)
		require.Equal(t, tc.group, group)

		rsp, err = tc.ch.Do(ctxT(t), &srptest.Request{CDB: rtpg, DataInLen: 256})
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
		require.Equal(t, []byte{0, 0, 0, 28, 0x10, 0, 0, 0,
			0x00, 0x8F, 0, 10, 0, 0, 0, 1, 0, 0, 0, 1,
			0x02, 0x8F, 0, 20, 0, 0, 0, 1, 0, 0, 0, 2}, rsp.DataIn)

		rsp, err = tc.ch.Read10(ctxT(t), 0, 0, 1, testBlockSize)
		require.NoError(t, err)
		if tc.readOK {
			require.NoError(t, rsp.Err())
		} else {
			require.Equal(t, uint8(0x02), rsp.Status)
			require.Equal(t, []byte{0x02, 0x04, 0x0B}, []byte{rsp.Sense[2] & 0x0F, rsp.Sense[12], rsp.Sense[13]})
		}
	}
}

// TestMorePortsInvalid: a second port must have its own identifier and relative port.
func TestMorePortsInvalid(t *testing.T) {
	second := testPortID
	second[0] ^= 0x80
	for _, tc := range []struct {
		name string
		more []srp.Port
		err  string
	}{
		{"no SCSI port", []srp.Port{{ID: second}}, "no SCSI target port"},
		{"same identifier", []srp.Port{{ID: testPortID, SCSI: &scsi.TargetPort{RelativeID: 2}}}, "configured twice"},
		{"same relative port", []srp.Port{{ID: second, SCSI: &scsi.TargetPort{RelativeID: 1}}}, "relative target port identifier 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := srp.New(srp.Config{TargetPortID: testPortID, MorePorts: tc.more})
			require.ErrorContains(t, err, tc.err)
		})
	}
}
