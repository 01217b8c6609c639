//go:build rbd

package main

import (
	"encoding/json"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDryRunRealMonitorNeverAnswers is TestDryRunChecksRunOutsideTheLock with librados and a
// monitor address that accepts connections and never answers: root's dry run waits for
// rados_mount_timeout outside the daemon lock (status answers meanwhile) and reports it.
func TestDryRunRealMonitorNeverAnswers(t *testing.T) {
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
	e := newControlEnv(t, e2eConfig)
	e.start()
	text := strings.ReplaceAll(strings.Replace(e2eConfig, "acls:\n", `  - lun: 7
    backstore: rbd
    rbd: {image: img, mon_host: "`+mon.Addr().String()+`", rados_mount_timeout: 3s}
acls:
`, 1), "DIR", e.dir)
	c, err := net.Dial("unix", e.opts.controlPath)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	_, err = c.Write([]byte(dryRunRequest(t, text) + "\n"))
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond)
	_, errOut, err := e.ctl("status")
	require.NoError(t, err, errOut)
	require.Less(t, time.Since(start), 3*time.Second, "status waited for the monitor")
	rsp := waitAnswer(t, c, 30*time.Second)
	require.True(t, rsp.OK, rsp.Error)
	var res reloadResult
	require.NoError(t, json.Unmarshal(rsp.Result, &res))
	require.Len(t, res.Errors, 1, res.Errors)
	require.Contains(t, res.Errors[0], "luns[2]: opening the backstore: ")
	require.NoError(t, e.stop(syscall.SIGTERM))
}
