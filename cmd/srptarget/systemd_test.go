package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
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
	e := newEnv(t, e2eConfig)
	e.start()
	m := sock.next()
	require.Equal(t, "1", m["READY"])
	require.Equal(t, "serving", m["STATUS"])

	before := monotonicUsec(t)
	e.writeConfig(e2eReloadConfig)
	require.NoError(t, e.reload())
	m = sock.next()
	require.Equal(t, "1", m["RELOADING"])
	usec, err := strconv.ParseInt(m["MONOTONIC_USEC"], 10, 64)
	require.NoError(t, err, "MONOTONIC_USEC with RELOADING=1")
	require.GreaterOrEqual(t, usec, before, "MONOTONIC_USEC is CLOCK_MONOTONIC at the reload")
	require.LessOrEqual(t, usec, monotonicUsec(t))
	require.Equal(t, "1", sock.next()["READY"], "READY=1 after the reload")

	// A reload that fails still ends with READY=1: the old configuration serves.
	e.writeConfig(e2eBadConfig)
	require.Error(t, e.reload())
	require.Equal(t, "1", sock.next()["RELOADING"])
	m = sock.next()
	require.Equal(t, "1", m["READY"])
	require.Contains(t, m["STATUS"], "reload failed")

	require.NoError(t, e.stop(syscall.SIGTERM))
	require.Equal(t, "1", sock.next()["STOPPING"])
}

// errNoDeviceYet is what the RDMA seams return before the device exists (rdmaError's mark).
var errNoDeviceYet = fmt.Errorf("verbs: no RDMA device: %w", errNoRDMAKernel)

// TestServeWaitsForDevice starts serve on a host whose RDMA device comes later (the device
// list is empty, or says that the kernel has no RDMA yet) and checks that it waits, tells
// systemd, then listens and serves without a reload.
func TestServeWaitsForDevice(t *testing.T) {
	for _, tc := range []struct {
		name         string
		missingPolls int32 // how many calls of the device list say "no device"
		listErr      error // the device list's answer while missing; nil: an empty list
		wantLog      string
	}{
		{name: "empty device list", missingPolls: 3, wantLog: "no RDMA device yet: waiting for one (the driver of the adapter, or rdma_rxe, may not be loaded yet); SIGTERM stops"},
		{name: "no RDMA in the kernel yet", missingPolls: 3, listErr: errNoDeviceYet, wantLog: "no RDMA device yet: waiting for one (the driver of the adapter, or rdma_rxe, may not be loaded yet); SIGTERM stops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := newNotifySocket(t)
			e := newEnv(t, e2eConfig)
			var polls atomic.Int32
			e.opts.devicePoll = 10 * time.Millisecond
			e.opts.devices = func() ([]rdmaDevice, error) {
				if polls.Add(1) <= tc.missingPolls {
					return nil, tc.listErr
				}
				return []rdmaDevice{{Name: "rxe0", NodeGUID: 0x0002c90300a34270}}, nil
			}
			e.start()
			require.Equal(t, 1, e.count(tc.wantLog), e.logText())
			require.Equal(t, 1, e.count("listening", "address", "192.0.2.1:5555"))
			m := sock.next()
			require.Equal(t, "1", m["READY"])
			require.Equal(t, "waiting for an RDMA device", m["STATUS"])
			require.Equal(t, "serving", sock.next()["STATUS"])

			ch, err := e.login(rwInitiator, "", 5555)
			require.NoError(t, err, "serves once the device is there")
			require.NoError(t, ch.Close())
			require.NoError(t, e.stop(syscall.SIGTERM))
		})
	}
}

// TestServeRetriesWhenAddressesChange: the device is there but not yet the listener's address
// (rdma_bind_addr fails with EADDRNOTAVAIL). serve waits without trying again while nothing
// changes (each attempt opens the backstores and registers a buffer pool), and starts once
// the host's addresses change.
func TestServeRetriesWhenAddressesChange(t *testing.T) {
	sock := newNotifySocket(t)
	e := newEnv(t, e2eConfig)
	var addrUp atomic.Bool
	var listens atomic.Int32
	e.opts.devicePoll = 10 * time.Millisecond
	e.opts.devices = func() ([]rdmaDevice, error) {
		return []rdmaDevice{{Name: "rxe0", NodeGUID: 0x0002c90300a34270}}, nil
	}
	e.opts.interfaces = func() ([]hostAddr, error) {
		if !addrUp.Load() {
			return nil, nil
		}
		return []hostAddr{{Iface: "dummy0", Addr: testTargetAddr}}, nil
	}
	e.opts.listen = func(ap netip.AddrPort) (ib.Listener, error) {
		listens.Add(1)
		if !addrUp.Load() {
			return nil, fmt.Errorf("listen %v: rdma_bind_addr: %w", ap, errNoDeviceYet)
		}
		return e.listen(ap)
	}
	const waiting = "no RDMA device has the address of a listener yet: waiting, and trying again when the RDMA devices or the host's addresses change, or on SIGHUP; SIGTERM stops"
	attemptsWhileDown := make(chan int32, 1)
	go func() { // no require here: not the test's goroutine
		for end := time.Now().Add(10 * time.Second); e.count(waiting) == 0 && time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(20 * e.opts.devicePoll)
		attemptsWhileDown <- listens.Load()
		addrUp.Store(true)
	}()
	e.start()
	require.Equal(t, int32(1), <-attemptsWhileDown, "no new attempt while nothing changes")
	require.Equal(t, 1, e.count("the RDMA devices or the host's addresses changed: trying to start again"), e.logText())
	require.Equal(t, 1, e.count("cannot listen yet"))
	require.Equal(t, 1, e.count("listening", "address", "192.0.2.1:5555"))
	m := sock.next()
	require.Equal(t, "waiting for an RDMA device", m["STATUS"])
	require.Equal(t, "serving", sock.next()["STATUS"])

	ch, err := e.login(rwInitiator, "", 5555)
	require.NoError(t, err)
	require.NoError(t, ch.Close())
	require.NoError(t, e.stop(syscall.SIGTERM))
}

// TestServeStopsWhileWaitingForDevice: SIGTERM ends the wait at once, with exit status 0.
func TestServeStopsWhileWaitingForDevice(t *testing.T) {
	sock := newNotifySocket(t)
	e := newEnv(t, e2eConfig)
	e.opts.devicePoll = 10 * time.Millisecond
	e.opts.devices = func() ([]rdmaDevice, error) { return nil, errNoDeviceYet }
	e.opts.listen = func(netip.AddrPort) (ib.Listener, error) {
		t.Error("listen called without a device")
		return nil, errNoDeviceYet
	}
	go func() { e.served <- runServe(e.opts) }()
	require.Equal(t, "1", sock.next()["READY"])

	// A reload while waiting checks the file and says so.
	require.NoError(t, e.reload())
	require.Equal(t, "1", sock.next()["RELOADING"])
	require.Equal(t, "1", sock.next()["READY"])

	start := time.Now()
	require.NoError(t, e.stop(syscall.SIGTERM))
	require.Less(t, time.Since(start), 2*time.Second, "SIGTERM stops the wait promptly")
	require.Equal(t, "1", sock.next()["STOPPING"])
	require.Equal(t, 1, e.count("stopping while waiting for an RDMA device: nothing was serving"), e.logText())
}

// TestServeWithoutDeviceRefusesBadConfigAtOnce: a configuration that cannot start fails now,
// not when a device appears.
func TestServeWithoutDeviceRefusesBadConfigAtOnce(t *testing.T) {
	e := newEnv(t, e2eBadConfig)
	e.opts.devices = func() ([]rdmaDevice, error) { return nil, nil }
	err := runServe(e.opts)
	var ec exitCodeError
	require.True(t, errors.As(err, &ec), "%v", err)
	require.Equal(t, 1, ec.code)
	require.Equal(t, 1, e.count("srptarget did not start", "errors", 2), e.logText())
}
