package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest/observer"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// env is a daemon running runServe on an in-memory fabric (daemontest.Env), driven by
// signals sent through a channel, with its logs observed.
type env struct {
	*daemontest.Env
	d    *daemon
	opts serveOptions
}

// newEnv writes config (with DIR replaced by a temporary directory) and prepares the daemon;
// start runs it.
func newEnv(t *testing.T, config string) *env {
	t.Helper()
	e := &env{Env: daemontest.New(t, config)}
	e.opts = serveOptions{
		daemonOptions: daemonOptions{
			configFile: e.File,
			log:        e.Log,
			listen:     e.Listen,
			devices:    func() ([]Device, error) { return nil, errors.New("no devices in tests") },
			interfaces: func() ([]HostAddr, error) { return nil, nil },
		},
		Process:     Process{ShutdownTimeout: 10 * time.Second},
		signals:     e.Sigs,
		exit:        func(code int) { e.Exits <- code },
		afterReload: func(err error) { e.Reloads <- err },
	}
	return e
}

// start runs the daemon and waits until it serves.
func (e *env) start() {
	e.T.Helper()
	ready := make(chan *daemon, 1)
	e.opts.ready = func(d *daemon) { ready <- d }
	e.d = daemontest.Start(e.Env, ready, func() error { return runServe(e.opts) })
}

func TestDaemonEndToEnd(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	e.start()
	const bs = 512

	// Start-up logs: identity, LUNs with sizes and backstores, ACLs, listener, add_target.
	require.Equal(t, 1, e.Count("target identity", "id_ext", "0002c90300a34270", "ioc_guid", "0002c90300a34270", "from", "configuration"))
	lunLogs := e.Logs.FilterMessage("LUN").All()
	require.Len(t, lunLogs, 2)
	require.Equal(t, "memory", lunLogs[0].ContextMap()["backstore"])
	require.Equal(t, "16MiB", lunLogs[0].ContextMap()["size"])
	require.Equal(t, "0002c90300a342700000", lunLogs[0].ContextMap()["serial"])
	require.Equal(t, "file", lunLogs[1].ContextMap()["backstore"])
	require.Equal(t, "8MiB", lunLogs[1].ContextMap()["size"])
	require.Equal(t, filepath.Join(e.Dir, "lun1.img"), lunLogs[1].ContextMap()["path"])
	require.Equal(t, 2, e.Logs.FilterMessage("ACL").Len())
	require.Equal(t, 1, e.Count("listening", "address", "192.0.2.1:5555"))
	require.Equal(t, 1, e.Count("initiator login (on the initiator, as root)", "add_target",
		`echo "id_ext=0002c90300a34270,ioc_guid=0002c90300a34270,dest=192.0.2.1:5555" > /sys/class/infiniband_srp/srp-<dev>-<port>/add_target`))

	// The read-write initiator writes and reads both LUNs.
	rw := e.LoginRW()
	daemontest.ClearUA(t, rw, 1)
	ctx := context.Background()
	data0, data1 := testutil.Pattern(8*bs, 1), testutil.Pattern(8*bs, 2)
	daemontest.Write10(t, rw, 0, 8, data0, bs)
	daemontest.Write10(t, rw, 1, 8, data1, bs)
	require.Equal(t, data0, daemontest.Read10(t, rw, 0, 8, 8, bs))
	require.Equal(t, data1, daemontest.Read10(t, rw, 1, 8, 8, bs))

	// The initiator matching the read-only ACL by its source address reads the same data and
	// is refused writes with DATA PROTECT, WRITE PROTECTED.
	ro := e.MustLogin(daemontest.ROInitiator, "198.51.100.7", 5555)
	daemontest.ClearUA(t, ro, 0)
	require.Equal(t, data0, daemontest.Read10(t, ro, 0, 8, 8, bs))
	rsp, err := ro.Write10(ctx, 0, 8, testutil.Pattern(bs, 9), bs)
	require.NoError(t, err)
	daemontest.RequireSense(t, rsp, daemontest.SenseDataProtect, 0x27, 0x00)

	// An initiator in no ACL is refused, and the engine's log line carries the reason and the
	// ACL to add.
	_, err = e.Login(daemontest.StrangerInitiator, "203.0.113.9", 5555)
	var rej *srptest.LoginRejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, iu.LoginRejChannelLimitReached, rej.Reason)
	rejects := e.Logs.FilterMessage("login rejected").Filter(func(l observer.LoggedEntry) bool {
		return fmt.Sprint(l.ContextMap()["initiator"]) == daemontest.StrangerInitiator.String()
	}).All()
	require.Len(t, rejects, 1)
	require.Equal(t, iu.LoginRejChannelLimitReached.String(), rejects[0].ContextMap()["reason"])
	require.Equal(t, `initiator 0x0000000000000000000000000000cccc from 203.0.113.9 matches none of the 2 ACLs; `+
		`to let it in, add to acls: {initiators: ["0x0000000000000000000000000000cccc"], luns: [0, 1]} `+
		`(or sources: ["203.0.113.9"] instead of initiators)`, rejects[0].ContextMap()["detail"])

	// Reload: LUN 1 removed, LUN 2 added, a listener added.
	lu0 := e.d.luns[0].lu
	e.WriteConfig(daemontest.E2EReloadConfig)
	require.NoError(t, e.Reload())
	require.Same(t, lu0, e.d.luns[0].lu, "an unchanged LUN keeps its logical unit")
	require.Equal(t, 1, e.Count("configuration reloaded", "luns_added", "[2]", "luns_removed", "[1]", "luns_unchanged", "[0]", "luns_changed", "[]"))
	// The initiators get REPORTED LUNS DATA HAS CHANGED, and REPORT LUNS shows the change.
	rsp = daemontest.Do(t, rw, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()})
	daemontest.RequireSense(t, rsp, daemontest.SenseUnitAttention, 0x3F, 0x0E)
	require.Equal(t, []uint16{0, 2}, daemontest.ReportLUNs(t, rw))
	rsp = daemontest.Do(t, ro, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()})
	daemontest.RequireSense(t, rsp, daemontest.SenseUnitAttention, 0x3F, 0x0E)
	require.Equal(t, []uint16{0, 2}, daemontest.ReportLUNs(t, ro))
	// LUN 0 kept its data; LUN 1 is gone; LUN 2 works.
	require.Equal(t, data0, daemontest.Read10(t, rw, 0, 8, 8, bs))
	rsp = daemontest.Do(t, rw, &srptest.Request{LUN: 1, CDB: srptest.CDBTestUnitReady()})
	daemontest.RequireSense(t, rsp, daemontest.SenseIllegalRequest, 0x25, 0x00)
	daemontest.ClearUA(t, rw, 2)
	data2 := testutil.Pattern(4*bs, 3)
	daemontest.Write10(t, rw, 2, 0, data2, bs)
	require.Equal(t, data2, daemontest.Read10(t, rw, 2, 0, 4, bs))
	// The removed LUN's file was flushed and closed: it holds what was written.
	e.d.closers.Wait()
	f, err := os.ReadFile(filepath.Join(e.Dir, "lun1.img"))
	require.NoError(t, err)
	require.Len(t, f, 8<<20)
	require.Equal(t, data1, f[8*bs:16*bs])
	// The new listener takes logins.
	extra, err := e.Login(daemontest.PortID(0xdddd), "198.51.100.8", 5556)
	require.NoError(t, err)
	daemontest.ClearUA(t, extra, 0)
	require.NoError(t, extra.Close())

	// A bad configuration is refused as a whole, each error logged with its line.
	e.WriteConfig(daemontest.E2EBadConfig)
	err = e.Reload()
	var errs config.Errors
	require.ErrorAs(t, err, &errs)
	var logged []string
	for _, l := range e.Logs.FilterMessage("configuration error").All() {
		logged = append(logged, l.ContextMap()["error"].(string))
	}
	require.Equal(t, []string{
		e.File + ":7: luns[0].size: 1000 is not a multiple of the block size 512",
		e.File + ":10: acls[0].luns[1]: LUN 9 is not defined under luns",
	}, logged)
	require.Equal(t, 1, e.Logs.FilterMessage("reload failed: the running configuration is unchanged").Len())
	require.Equal(t, []uint16{0, 2}, daemontest.ReportLUNs(t, rw))
	require.Equal(t, data2, daemontest.Read10(t, rw, 2, 0, 4, bs))

	// SIGTERM: every channel gets SRP_T_LOGOUT, runServe returns nil (exit status 0).
	require.NoError(t, e.Stop(syscall.SIGTERM))
	for _, ch := range []*srptest.Channel{rw, ro} {
		select {
		case <-ch.TargetLogout():
		case <-time.After(5 * time.Second):
			t.Fatal("no SRP_T_LOGOUT")
		}
	}
	require.Equal(t, 1, e.Logs.FilterMessage("every backstore flushed and closed").Len())
	require.Empty(t, e.Exits)
}

func TestServeSecondSignalExitsAtOnce(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	got := make(chan int, 1)
	e.opts.beforeShutdown = func() {
		// The shutdown is under way: a second signal must exit at once.
		e.Sigs <- os.Interrupt
		got <- <-e.Exits
	}
	e.start()
	e.MustLogin(daemontest.RWInitiator, "", 5555)
	require.NoError(t, e.Stop(syscall.SIGTERM))
	require.Equal(t, 128+int(syscall.SIGINT), <-got)
	require.Equal(t, 1, e.Count("second signal: exiting at once without finishing the shutdown", "signal", "interrupt"))
}

func TestServeStartFailureLeavesNothingOpen(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	// Something else listens on the port already.
	other, err := e.Node.Listen(5555)
	require.NoError(t, err)
	defer other.Close()
	err = runServe(e.opts)
	require.Equal(t, ExitError{1}, err)
	require.Equal(t, 1, e.Count("configuration error", "error",
		e.File+":4: listeners[0]: listening on 192.0.2.1:5555: memfabric: listen 192.0.2.1:5555 in RDMA_PS_TCP: address already in use"))
	require.Equal(t, 1, e.Count("srptarget did not start", "errors", 1))
	// The file the configuration would have created was removed again.
	_, err = os.Stat(filepath.Join(e.Dir, "lun1.img"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestServeStartFailureRemovesMadeDirectories: a file made by create: true in directories
// that did not exist takes them along when the start fails.
func TestServeStartFailureRemovesMadeDirectories(t *testing.T) {
	e := newEnv(t, strings.Replace(daemontest.E2EConfig, "DIR/lun1.img", "DIR/new/deeper/lun1.img", 1))
	other, err := e.Node.Listen(5555)
	require.NoError(t, err)
	defer other.Close()
	require.Equal(t, ExitError{1}, runServe(e.opts))
	_, err = os.Stat(filepath.Join(e.Dir, "new"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(e.Dir)
	require.NoError(t, err, "a directory that existed before was removed")
}
