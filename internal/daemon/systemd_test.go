package daemon

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
)

// notifySocket listens where the daemon's sd_notify(3) messages go: a unixgram socket named
// by NOTIFY_SOCKET, as systemd makes for a Type=notify service.
type notifySocket struct {
	t    *testing.T
	conn *net.UnixConn
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return &notifySocket{t: t, conn: conn}
}

// next returns the variables of the next datagram.
func (n *notifySocket) next() map[string]string {
	n.t.Helper()
	require.NoError(n.t, n.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 4096)
	k, err := n.conn.Read(buf)
	require.NoError(n.t, err, "no sd_notify message in 10 s")
	vars := map[string]string{}
	for _, line := range strings.Split(string(buf[:k]), "\n") {
		name, value, ok := strings.Cut(line, "=")
		require.True(n.t, ok, "sd_notify line %q is not VAR=value", line)
		vars[name] = value
	}
	return vars
}

func monotonicUsec(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	require.NoError(t, unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts))
	return ts.Nano() / 1000
}

// TestNotifyProtocol follows sd_notify(3) as systemd sees it for a Type=notify unit with
// ExecReload=kill -HUP: READY=1 once the daemon serves, RELOADING=1 with MONOTONIC_USEC then
// READY=1 around a reload, STOPPING=1 at shutdown.
func TestNotifyProtocol(t *testing.T) {
	sock := newNotifySocket(t)
	e := newEnv(t, daemontest.E2EConfig)
	e.start()
	m := sock.next()
	require.Equal(t, "1", m["READY"])
	require.Equal(t, "serving", m["STATUS"])

	before := monotonicUsec(t)
	e.WriteConfig(daemontest.E2EReloadConfig)
	require.NoError(t, e.Reload())
	m = sock.next()
	require.Equal(t, "1", m["RELOADING"])
	usec, err := strconv.ParseInt(m["MONOTONIC_USEC"], 10, 64)
	require.NoError(t, err, "MONOTONIC_USEC with RELOADING=1")
	require.GreaterOrEqual(t, usec, before, "MONOTONIC_USEC is CLOCK_MONOTONIC at the reload")
	require.LessOrEqual(t, usec, monotonicUsec(t))
	require.Equal(t, "1", sock.next()["READY"], "READY=1 after the reload")

	// A reload that fails still ends with READY=1: the old configuration serves.
	e.WriteConfig(daemontest.E2EBadConfig)
	require.Error(t, e.Reload())
	require.Equal(t, "1", sock.next()["RELOADING"])
	m = sock.next()
	require.Equal(t, "1", m["READY"])
	require.Contains(t, m["STATUS"], "reload failed")

	require.NoError(t, e.Stop(syscall.SIGTERM))
	require.Equal(t, "1", sock.next()["STOPPING"])
}

// errNoDeviceYet is what the RDMA seams return before the device exists (rdmaError's mark).
var errNoDeviceYet = fmt.Errorf("verbs: no RDMA device: %w", errNoRDMAKernel)

// TestServeWaitsForDevice starts serve on a host whose RDMA device comes later (the device
// list is empty, or says that the kernel has no RDMA yet) with no target identity in the
// configuration: it checks what it can (the backstores open: LUN 1's directory exists), tells
// systemd that it waits, then starts when the device appears, without a reload.
func TestServeWaitsForDevice(t *testing.T) {
	for _, tc := range []struct {
		name         string
		missingPolls int32 // how many calls of the device list say "no device"
		listErr      error // the device list's answer while missing; nil: an empty list
	}{
		{name: "empty device list", missingPolls: 4},
		{name: "no RDMA in the kernel yet", missingPolls: 4, listErr: errNoDeviceYet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := newNotifySocket(t)
			e := newEnv(t, daemontest.NoIdentity)
			var polls atomic.Int32
			e.opts.devicePoll = 10 * time.Millisecond
			e.opts.devices = func() ([]Device, error) {
				if polls.Add(1) <= tc.missingPolls {
					return nil, tc.listErr
				}
				return []Device{{Name: "rxe0", NodeGUID: 0x0002c90300a34270}}, nil
			}
			e.start()
			require.Equal(t, 1, e.Count("no RDMA device yet: waiting for one (the driver of the adapter, or rdma_rxe, may not be loaded yet); the target identity will be its node GUID (or set target.id_ext); SIGTERM stops"), e.LogText())
			require.Equal(t, 1, e.Count("listening", "address", "192.0.2.1:5555"))
			m := sock.next()
			require.Equal(t, "1", m["READY"])
			require.Equal(t, "waiting for an RDMA device", m["STATUS"])
			require.Equal(t, "serving", sock.next()["STATUS"])

			ch, err := e.Login(daemontest.RWInitiator, "", 5555)
			require.NoError(t, err, "serves once the device is there")
			require.NoError(t, ch.Close())
			require.NoError(t, e.Stop(syscall.SIGTERM))
		})
	}
}

// TestServeChecksBeforeReady: without a device and without a configured identity, serve
// still opens every backstore before it tells systemd READY=1, and a backstore it cannot open
// fails the start at once with the reason, not when the device appears.
func TestServeChecksBeforeReady(t *testing.T) {
	e := newEnv(t, strings.Replace(daemontest.NoIdentity, "    create: true\n", "", 1))
	e.opts.devices = func() ([]Device, error) { return nil, errNoDeviceYet }
	require.Equal(t, ExitError{1}, runServe(e.opts))
	require.Equal(t, 1, e.Count("srptarget did not start", "errors", 1), e.LogText())
	require.Contains(t, e.LogText(), "lun1.img")
}

// TestServeListenersOneByOne: with the identity known, serve starts at once (the LUNs, the
// ACLs and the control socket work) and each listener listens as soon as an RDMA device has
// its address, without waiting for the others: STATUS= and status say which wait, status
// exits 4 while none listens, srptarget_serving follows.
func TestServeListenersOneByOne(t *testing.T) {
	sock := newNotifySocket(t)
	e := newControlEnv(t, strings.Replace(daemontest.E2EConfig, "    port: 5555\n", "    port: 5555\n  - address: 192.0.2.1\n    port: 5556\n", 1))
	e.opts.metrics = &daemonCollector{}
	var up [2]atomic.Bool
	var listens atomic.Int32
	var change atomic.Int32 // what the host's addresses look like: a change ends a wait
	e.opts.devicePoll = 10 * time.Millisecond
	e.opts.interfaces = func() ([]HostAddr, error) {
		return []HostAddr{{Iface: fmt.Sprintf("dummy%d", change.Load()), Addr: daemontest.TargetAddr}}, nil
	}
	e.opts.listen = func(ap netip.AddrPort) (ib.Listener, error) {
		listens.Add(1)
		if !up[ap.Port()-5555].Load() {
			return nil, fmt.Errorf("listen %v: rdma_bind_addr: %w", ap, errNoDeviceYet)
		}
		return e.Listen(ap)
	}
	e.start()
	m := sock.next()
	require.Equal(t, "1", m["READY"])
	require.Equal(t, "waiting for an RDMA device with the address of 192.0.2.1:5555, 192.0.2.1:5556", m["STATUS"])
	require.Equal(t, 2, e.Count("no RDMA device has the address of this listener yet: it listens when one does (checked when the RDMA devices or the host's addresses change)"), e.LogText())

	var st control.StatusInfo
	e.ctlJSON(&st, "status")
	require.Equal(t, statusWaitingDevice, st.State)
	require.Contains(t, st.Listeners, control.ListenerInfo{Address: "192.0.2.1:5555", State: listenerWaiting})
	require.Equal(t, 0.0, e.opts.metrics.servingValue())
	// Every command answers meanwhile.
	var ls []control.LUNInfo
	e.ctlJSON(&ls, "luns")
	require.Len(t, ls, 2)
	var ss []control.SessionInfo
	e.ctlJSON(&ss, "sessions")
	require.Empty(t, ss)
	var res control.ReloadResult
	e.ctlJSON(&res, "reload")
	require.True(t, res.Applied, "%+v", res)
	require.Equal(t, "waiting for an RDMA device with the address of 192.0.2.1:5555, 192.0.2.1:5556", sock.skipTo("READY")["STATUS"])

	// Nothing is tried again while nothing changes.
	before := listens.Load()
	time.Sleep(20 * e.opts.devicePoll)
	require.Equal(t, before, listens.Load(), "no attempt while the host's devices and addresses stay the same")

	up[1].Store(true)
	change.Add(1)
	require.Equal(t, "serving on 1 listener; waiting for an RDMA device with the address of 192.0.2.1:5555", sock.next()["STATUS"])
	require.Equal(t, 1, e.Count("listening", "address", "192.0.2.1:5556"))
	ch, err := e.Login(daemontest.RWInitiator, "", 5556)
	require.NoError(t, err, "the second listener serves before the first")
	require.NoError(t, ch.Close())
	e.ctlJSON(&st, "status")
	require.Equal(t, "serving", st.State)
	require.Equal(t, []control.ListenerInfo{{Address: "192.0.2.1:5555", State: listenerWaiting}, {Address: "192.0.2.1:5556", State: "listening"}}, st.Listeners)
	require.Equal(t, 1.0, e.opts.metrics.servingValue())

	up[0].Store(true)
	change.Add(1)
	require.Equal(t, "serving", sock.next()["STATUS"])
	require.Equal(t, 1, e.Count("every listener listens"))
	ch, err = e.Login(daemontest.RWInitiator, "", 5555)
	require.NoError(t, err)
	require.NoError(t, ch.Close())
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// TestServeStopsWhileWaitingForDevice: SIGTERM ends the wait at once, with exit status 0.
func TestServeStopsWhileWaitingForDevice(t *testing.T) {
	sock := newNotifySocket(t)
	e := newEnv(t, daemontest.NoIdentity)
	e.opts.devicePoll = 10 * time.Millisecond
	e.opts.devices = func() ([]Device, error) { return nil, errNoDeviceYet }
	e.opts.listen = func(netip.AddrPort) (ib.Listener, error) {
		t.Error("listen called without a device")
		return nil, errNoDeviceYet
	}
	go func() { e.Served <- runServe(e.opts) }()
	require.Equal(t, "1", sock.next()["READY"])

	// A reload while waiting checks the file and says so.
	require.NoError(t, e.Reload())
	require.Equal(t, "1", sock.next()["RELOADING"])
	require.Equal(t, "1", sock.next()["READY"])

	start := time.Now()
	require.NoError(t, e.Stop(syscall.SIGTERM))
	require.Less(t, time.Since(start), 2*time.Second, "SIGTERM stops the wait promptly")
	require.Equal(t, "1", sock.next()["STOPPING"])
	require.Equal(t, 1, e.Count("stopping while waiting for an RDMA device: nothing was serving"), e.LogText())
}

// TestServeWithoutDeviceRefusesBadConfigAtOnce: a configuration that cannot start fails now,
// not when a device appears.
func TestServeWithoutDeviceRefusesBadConfigAtOnce(t *testing.T) {
	e := newEnv(t, daemontest.E2EBadConfig)
	e.opts.devices = func() ([]Device, error) { return nil, nil }
	require.Equal(t, ExitError{1}, runServe(e.opts))
	require.Equal(t, 1, e.Count("srptarget did not start", "errors", 2), e.LogText())
}

// skipTo returns the variables of the next datagram that has name.
func (n *notifySocket) skipTo(name string) map[string]string {
	n.t.Helper()
	for {
		if m := n.next(); m[name] != "" {
			return m
		}
	}
}

// servingValue is what srptarget_serving says now.
func (c *daemonCollector) servingValue() float64 {
	ch := make(chan prometheus.Metric, 4096)
	c.Collect(ch)
	close(ch)
	for m := range ch {
		if m.Desc() == descServing {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil {
				return -1
			}
			return pb.GetGauge().GetValue()
		}
	}
	return -1
}

// TestServeLateStartFailsThenRecovers: without a configured identity serve waits for a device;
// when the device appears the second stage can still fail (here LUN 1's directory went away
// after READY=1). The daemon then stays up, says why at error level and in STATUS=, answers
// status (exit 4: nothing served), and starts once the cause is fixed and srptarget reload
// asks, without a restart.
func TestServeLateStartFailsThenRecovers(t *testing.T) {
	sock := newNotifySocket(t)
	e := newControlEnv(t, strings.Replace(daemontest.NoIdentity, "DIR/lun1.img", "DIR/luns/lun1.img", 1))
	luns := filepath.Join(e.Dir, "luns")
	require.NoError(t, os.Mkdir(luns, 0o700))
	var present atomic.Bool
	e.opts.devicePoll = 10 * time.Millisecond
	e.opts.devices = func() ([]Device, error) {
		if !present.Load() {
			return nil, errNoDeviceYet
		}
		return []Device{{Name: "rxe0", NodeGUID: 0x0002c90300a34270}}, nil
	}
	go func() { e.Served <- runServe(e.opts) }()
	m := sock.next()
	require.Equal(t, "1", m["READY"])
	require.Equal(t, statusWaitingDevice, m["STATUS"])

	require.NoError(t, os.Remove(luns))
	present.Store(true)
	require.Equal(t, "the start failed once an RDMA device appeared (journalctl -u srptarget -p err); waiting for a reload", sock.next()["STATUS"])
	failed := e.Logs.FilterMessage("the start failed once an RDMA device appeared: fix what the errors say and reload (systemctl reload srptarget); trying again when the RDMA devices or the host's addresses change").All()
	require.Len(t, failed, 1, e.LogText())
	require.Equal(t, zapcore.ErrorLevel, failed[0].Level)
	reason := e.Logs.FilterMessage("configuration error").All()
	require.Len(t, reason, 1, e.LogText())
	require.Equal(t, zapcore.ErrorLevel, reason[0].Level)
	require.Contains(t, reason[0].ContextMap()["error"], "luns[1].path: directory "+luns+" does not exist")

	var st control.StatusInfo
	e.ctlJSON(&st, "status")
	require.Equal(t, statusWaitingDevice, st.State)
	_, err := e.Login(daemontest.RWInitiator, "", 5555)
	require.Error(t, err, "nothing listens after the failed start")

	require.NoError(t, os.Mkdir(luns, 0o700))
	var res control.ReloadResult
	e.ctlJSON(&res, "reload")
	require.Empty(t, res.Errors)
	var statuses []string
	for len(statuses) == 0 || statuses[len(statuses)-1] != "serving" {
		statuses = append(statuses, sock.skipTo("STATUS")["STATUS"])
	}
	require.Equal(t, []string{"reloading the configuration", statusWaitingDevice, "serving"}, statuses)
	ch, err := e.Login(daemontest.RWInitiator, "", 5555)
	require.NoError(t, err, "serves after the reload")
	require.NoError(t, ch.Close())
	e.ctlJSON(&st, "status")
	require.Equal(t, "serving", st.State)
	require.FileExists(t, filepath.Join(luns, "lun1.img"))
	require.NoError(t, e.Stop(syscall.SIGTERM))
}
