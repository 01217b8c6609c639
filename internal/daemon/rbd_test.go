package daemon

import (
	"context"
	"encoding/binary"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/cephtest"
	"github.com/srptarget/srptarget/srp/srptest"
)

// TestDaemonRBDEndToEnd serves an RBD image over the in-memory fabric: an initiator writes and
// reads it, a resize made by another client reaches it as CAPACITY DATA HAS CHANGED with no
// reload, and with the OSD stopped (SIGSTOP) commands end in LOGICAL UNIT COMMUNICATION
// TIME-OUT within the configured rados_osd_op_timeout, then work again after SIGCONT with the
// acknowledged data intact. Needs the cluster of make test-rbd (SRPT_RBD_CONF, SRPT_RBD_POOL).
func TestDaemonRBDEndToEnd(t *testing.T) {
	o := cephtest.Image(t, "e2e", 8<<20)
	conf, pool, image := o.ConfFile, o.Pool, o.Image
	conn := cephtest.Connect(t, o)

	e := newEnv(t, daemontest.E2EHead+fmt.Sprintf(`luns:
  - lun: 0
    backstore: rbd
    rbd:
      pool: %s
      image: %s
      ceph_conf: %s
      rados_osd_op_timeout: 3s
acls:
  - initiators: ["*"]
    luns: [0]
`, pool, image, conf))
	e.start()
	require.Equal(t, 1, e.Count("LUN", "backstore", "rbd", "image", pool+"/"+image, "size", "8MiB"))
	rw := e.LoginRW()
	const bs = 512
	ctx := context.Background()

	acked := testutil.Pattern(64*bs, 5)
	daemontest.Write10(t, rw, 0, 100, acked, bs)
	rsp := daemontest.Do(t, rw, &srptest.Request{LUN: 0, CDB: []byte{0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}}) // SYNCHRONIZE CACHE(10)
	require.NoError(t, rsp.Err())
	require.Equal(t, acked, daemontest.Read10(t, rw, 0, 100, 64, bs))
	require.Equal(t, uint64(8<<20/bs-1), lastLBA(t, rw))

	// A resize by another client: CAPACITY DATA HAS CHANGED, and the new blocks, no reload.
	img, err := conn.OpenImage(pool, "", image, false, 0)
	require.NoError(t, err)
	require.NoError(t, img.Resize(16<<20))
	require.NoError(t, img.Close())
	deadline := time.Now().Add(10 * time.Second)
	for {
		rsp = daemontest.Do(t, rw, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()})
		if !rsp.Good() {
			daemontest.RequireSense(t, rsp, daemontest.SenseUnitAttention, 0x2A, 0x09)
			break
		}
		require.True(t, time.Now().Before(deadline), "no CAPACITY DATA HAS CHANGED 10 s after the resize")
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, uint64(16<<20/bs-1), lastLBA(t, rw))
	require.Equal(t, 1, e.Count("capacity changed: CAPACITY DATA HAS CHANGED pending for every initiator", "size", "16MiB"))

	// The OSD stops answering: commands fail with HARDWARE ERROR, LOGICAL UNIT COMMUNICATION
	// TIME-OUT within the 3 s timeout (plus scheduling), never hang.
	pid := cephtest.OSDPID(t, o)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	for _, req := range []*srptest.Request{
		{LUN: 0, CDB: srptest.CDBWrite10(200, 8), DataOut: testutil.Pattern(8*bs, 6)},
		{LUN: 0, CDB: srptest.CDBRead10(100, 8), DataInLen: 8 * bs},
	} {
		start := time.Now()
		rsp = daemontest.Do(t, rw, req)
		took := time.Since(start)
		daemontest.RequireSense(t, rsp, 0x04, 0x08, 0x01)
		require.Less(t, took, 8*time.Second)
		t.Logf("CDB %#02x with the OSD stopped: sense 04/08/01 after %v", req.CDB[0], took.Round(time.Millisecond))
	}
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	stopped = false
	deadline = time.Now().Add(30 * time.Second)
	for {
		rsp, err = rw.Read10(ctx, 0, 100, 64, bs)
		require.NoError(t, err)
		if rsp.Good() {
			break
		}
		require.True(t, time.Now().Before(deadline), "reads still fail 30 s after SIGCONT: %v", rsp.Err())
		time.Sleep(200 * time.Millisecond)
	}
	require.Equal(t, acked, rsp.DataIn, "acknowledged data lost")
	daemontest.Write10(t, rw, 0, 200, testutil.Pattern(8*bs, 7), bs)

	require.NoError(t, e.Stop(syscall.SIGTERM))
	require.Equal(t, 1, e.Logs.FilterMessage("every backstore flushed and closed").Len())
}

// lastLBA asks READ CAPACITY(16).
func lastLBA(t *testing.T, ch *srptest.Channel) uint64 {
	t.Helper()
	rsp := daemontest.Do(t, ch, &srptest.Request{LUN: 0, CDB: srptest.CDBReadCapacity16(32), DataInLen: 32})
	require.NoError(t, rsp.Err())
	require.GreaterOrEqual(t, len(rsp.DataIn), 12)
	return binary.BigEndian.Uint64(rsp.DataIn)
}
