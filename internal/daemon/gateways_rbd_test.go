package daemon

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/cephtest"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// gatewayConfig is gateway N (1 or 2) of two in front of pool/image: its own target port and
// relative port, both ports in its ALUA groups, the same LUN serial.
func gatewayConfig(n int, pool, image, conf string) string {
	return fmt.Sprintf(`target:
  id_ext: "5e2e00000000b00%d"
  relative_port_id: %d
listeners:
  - address: 192.0.2.1
    port: 5555
limits:
  buffer_pool_size: 16MiB
state_dir: DIR/state
luns:
  - lun: 0
    backstore: rbd
    serial: "5e2e000000006001"
    rbd:
      pool: %s
      image: %s
      ceph_conf: %s
      rados_osd_op_timeout: 5s
      pr_lease: 5s
acls:
  - initiators: ["*"]
    luns: [0]
alua:
  groups:
    - {id: 1, state: active/optimized, ports: [1]}
    - {id: 2, state: active/non-optimized, ports: [2]}
`, n, n, pool, image, conf)
}

// gatewayLogin logs initiator id in to gateway n's target port.
func gatewayLogin(t *testing.T, e *env, n int, id iu.PortID) *srptest.Channel {
	t.Helper()
	var target iu.PortID
	binary.BigEndian.PutUint64(target[0:8], 0x5e2e00000000b000+uint64(n))
	binary.BigEndian.PutUint64(target[8:16], 0x5e2e00000000b000+uint64(n))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := srptest.Login(ctx, e.Fab, srptest.Config{Addr: netip.AddrPortFrom(daemontest.TargetAddr, 5555), InitiatorPortID: id, TargetPortID: target})
	require.NoError(t, err)
	t.Cleanup(func() { ch.Close() })
	return ch
}

// readKeys is READ KEYS through ch.
func readKeys(t *testing.T, ch *srptest.Channel) (generation uint32, keys []uint64) {
	t.Helper()
	rsp := daemontest.Do(t, ch, prInReq(0, 0))
	require.NoError(t, rsp.Err())
	for off := 8; off < 8+int(binary.BigEndian.Uint32(rsp.DataIn[4:])); off += 8 {
		keys = append(keys, binary.BigEndian.Uint64(rsp.DataIn[off:]))
	}
	return binary.BigEndian.Uint32(rsp.DataIn), keys
}

// TestTwoGatewaysShareReservations: two daemons serve one RBD image (pr_store: rados, the
// default); initiator X through gateway 1 and Y through gateway 2 see one set of
// registrations, one reservation and each other's unit attentions: what fence_scsi relies on.
// SET TARGET PORT GROUPS through one changes the states both report. A gateway that stops
// leaves, and the next change does not wait for it.
func TestTwoGatewaysShareReservations(t *testing.T) {
	o := cephtest.Image(t, "gw", 8<<20)
	conf, pool, image := o.ConfFile, o.Pool, o.Image
	conn := cephtest.Connect(t, o)
	t.Cleanup(func() { // after the daemons' own cleanups, which are registered later
		if obj, err := conn.OpenObject(pool, "", prObjectName(image)); err == nil {
			_ = obj.Remove()
			obj.Close()
		}
	})

	g1 := newControlEnv(t, gatewayConfig(1, pool, image, conf))
	g2 := newControlEnv(t, gatewayConfig(2, pool, image, conf))
	g1.start()
	g2.start()
	x := gatewayLogin(t, g1, 1, daemontest.PortID(0xaaaa))
	y := gatewayLogin(t, g2, 2, daemontest.PortID(0xbbbb))
	daemontest.ClearUA(t, x, 0)
	daemontest.ClearUA(t, y, 0)
	const bs = 512

	// Registrations through either gateway, read through the other, with their ports.
	require.NoError(t, daemontest.Do(t, x, prOutReq(0, 0x00, 0, 0, 0xa1, 0)).Err())
	require.NoError(t, daemontest.Do(t, y, prOutReq(0, 0x00, 0, 0, 0xb2, 0)).Err())
	gen, keys := readKeys(t, y)
	require.Equal(t, []uint64{0xa1, 0xb2}, keys)
	require.Equal(t, uint32(2), gen)
	rsp := daemontest.Do(t, x, prInReq(0, 3)) // READ FULL STATUS through gateway 1
	require.NoError(t, rsp.Err())
	d := rsp.DataIn[8:]
	require.Equal(t, uint16(1), binary.BigEndian.Uint16(d[18:]), "X via relative port 1")
	require.Equal(t, uint16(2), binary.BigEndian.Uint16(d[48+18:]), "Y via relative port 2")
	yid := daemontest.PortID(0xbbbb)
	require.Equal(t, yid[:], d[48+32:48+48], "Y's SRP TransportID")

	// X reserves Write Exclusive through gateway 1: Y's write through gateway 2 conflicts.
	require.NoError(t, daemontest.Do(t, x, prOutReq(0, 0x01, 0x01, 0xa1, 0, 0)).Err())
	rsp = daemontest.Do(t, y, &srptest.Request{LUN: 0, CDB: srptest.CDBWrite10(10, 1), DataOut: testutil.Pattern(bs, 1)})
	require.Equal(t, uint8(statusReservationConflict), rsp.Status)
	daemontest.Write10(t, x, 0, 10, testutil.Pattern(bs, 2), bs)
	requireReservation(t, y, []uint64{0xa1, 0xb2}, 0xa1, 0x01)

	// Y preempts X's key and reservation (PREEMPT AND ABORT, Exclusive Access) through
	// gateway 2: X hears REGISTRATIONS PREEMPTED on gateway 1, and then conflicts.
	start := time.Now()
	require.NoError(t, daemontest.Do(t, y, prOutReq(0, 0x05, 0x03, 0xb2, 0xa1, 0)).Err())
	t.Logf("PREEMPT AND ABORT through gateway 2 completed in %v", time.Since(start))
	rsp = daemontest.Do(t, x, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()})
	daemontest.RequireSense(t, rsp, daemontest.SenseUnitAttention, 0x2A, 0x05)
	rsp = daemontest.Do(t, x, &srptest.Request{LUN: 0, CDB: srptest.CDBWrite10(11, 1), DataOut: testutil.Pattern(bs, 3)})
	require.Equal(t, uint8(statusReservationConflict), rsp.Status)
	daemontest.Write10(t, y, 0, 11, testutil.Pattern(bs, 4), bs)
	requireReservation(t, x, []uint64{0xb2}, 0xb2, 0x03)

	// Explicit ALUA, the states shared too: SET TARGET PORT GROUPS through gateway 2 makes its
	// group active/optimized, and gateway 1's, the optimized one, active/non-optimized; X on
	// gateway 1 hears ASYMMETRIC ACCESS STATE CHANGED, and both report the same states.
	rsp = daemontest.Do(t, x, &srptest.Request{LUN: 0, CDB: []byte{0x12, 0, 0, 0, 36, 0}, DataInLen: 36})
	require.NoError(t, rsp.Err())
	require.Equal(t, byte(0x30), rsp.DataIn[5]&0x30, "TPGS 11b: implicit and explicit")
	rsp = daemontest.Do(t, y, &srptest.Request{LUN: 0, CDB: []byte{0xA4, 0x0A, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0}, DataOut: []byte{0, 0, 0, 0, 0x00, 0, 0, 2}})
	require.NoError(t, rsp.Err())
	testutil.WaitFor(t, "ASYMMETRIC ACCESS STATE CHANGED through gateway 1", func() bool {
		rsp := daemontest.Do(t, x, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()})
		return rsp.Status == 2 && len(rsp.Sense) > 13 && rsp.Sense[12] == 0x2A && rsp.Sense[13] == 0x06
	})
	rtpg := func(ch *srptest.Channel) []byte {
		rsp := daemontest.Do(t, ch, &srptest.Request{LUN: 0, CDB: []byte{0xA3, 0x0A | 1<<5, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, DataInLen: 256})
		require.NoError(t, rsp.Err())
		return rsp.DataIn
	}
	d1, d2 := rtpg(x), rtpg(y)
	require.Equal(t, d1, d2, "the same through both gateways")
	require.Equal(t, []byte{0x01, 0x00}, []byte{d1[8] & 0x0F, d1[8+12] & 0x0F}, "group 1 active/non-optimized, group 2 active/optimized")

	var ls []control.LUNInfo
	g1.ctlJSON(&ls, "luns")
	require.Equal(t, "rados", ls[0].Reservations.Store)
	require.False(t, ls[0].Reservations.Stale, "gateway 1's copy is current")
	require.Equal(t, []control.GroupState{{Group: 1, State: "active/non-optimized"}, {Group: 2, State: "active/optimized"}}, ls[0].Reservations.ALUA)

	// Gateway 2 stops: it leaves the members, so the next change through gateway 1 does not
	// wait for it.
	y.Close()
	require.NoError(t, g2.Stop(syscall.SIGTERM))
	start = time.Now()
	require.NoError(t, daemontest.Do(t, x, prOutReq(0, 0x00, 0, 0, 0xa1, 0)).Err())
	require.Less(t, time.Since(start), time.Second, "no wait for a gateway that left")
	_, keys = readKeys(t, x)
	require.Equal(t, []uint64{0xb2, 0xa1}, keys)
	x.Close()
	require.NoError(t, g1.Stop(syscall.SIGTERM))
	require.False(t, strings.Contains(g1.LogText(), "did not acknowledge"), "every change was acknowledged")
}
