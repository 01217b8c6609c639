package daemon

import (
	"encoding/json"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/stretchr/testify/require"
)

// TestDryRunRealMonitorNeverAnswers is TestDryRunChecksRunOutsideTheLock with librados and a
// monitor address that accepts connections and never answers: root's dry run waits for
// rados_mount_timeout outside the daemon lock (status answers meanwhile) and reports it.
func TestDryRunRealMonitorNeverAnswers(t *testing.T) {
	if !rbdBuilt {
		t.Skip("built without the build tag rbd: no librados to wait for the monitor")
	}
	mon, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer mon.Close()
	go func() {
		for {
			c, err := mon.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	text := strings.ReplaceAll(strings.Replace(daemontest.E2EConfig, "acls:\n", `  - lun: 7
    backstore: rbd
    rbd: {image: img, mon_host: "`+mon.Addr().String()+`", rados_mount_timeout: 3s}
acls:
`, 1), "DIR", e.Dir)
	c, err := net.Dial("unix", e.opts.ControlPath)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	_, err = c.Write([]byte(dryRunRequest(t, text) + "\n"))
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond)
	var st control.StatusInfo
	e.ctlJSON(&st, "status")
	require.Less(t, time.Since(start), 3*time.Second, "status waited for the monitor")
	rsp := waitAnswer(t, c, 30*time.Second)
	require.True(t, rsp.OK, rsp.Error)
	var res control.ReloadResult
	require.NoError(t, json.Unmarshal(rsp.Result, &res))
	require.Len(t, res.Errors, 1, res.Errors)
	require.Contains(t, res.Errors[0], "luns[2]: opening the backstore: ")
	require.NoError(t, e.Stop(syscall.SIGTERM))
}
