//go:build linux && cgo

package verbs

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
	"github.com/srptarget/srptarget/internal/testutil"
)

// logCapture collects what a Listener's Logf receives.
type logCapture struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (c *logCapture) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	c.t.Log(line)
	c.mu.Lock()
	c.lines = append(c.lines, line)
	c.mu.Unlock()
}

// wait returns the nth line (from 1) that names a device removal, waiting for it.
func (c *logCapture) wait(t *testing.T, n int) string {
	t.Helper()
	var line string
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		k := 0
		for _, l := range c.lines {
			if strings.Contains(l, "RDMA device removed: ") {
				if k++; k == n {
					line = l
					return true
				}
			}
		}
		return false
	}, waitLimit, 10*time.Millisecond, "removal notice %d through the wildcard listener's Logf", n)
	return line
}

// TestDeviceRemoval deletes the device (rdma link delete) under what a target daemon holds,
// twice. Busy: a wildcard listener, a listener bound to the device's address, an established
// connection (both ends are in this process) and registered memory, one region of which stands
// for a buffer pool that the engine keeps for as long as the device lives. Idle: only the
// wildcard listener and such a region, after every connection has ended (the removal is then
// reported on no id of the engine: the package's sentinel id catches it). Each time, rdma link
// delete must complete while all of it is still open: rxe cannot disassociate user contexts,
// so the kernel waits for every file of the device to be closed, and the package has to
// release everything on its own, librdmacm's context of the device included. After each, the
// device is added back and the wildcard listener, never closed, serves it again. A wildcard
// AF_IB listener stays open through both removals.
//
// Destructive: it runs only when SRPT_VERBS_REMOVE_DEVICE names the device (an rxe device: it
// is added back with rdma link add ... type rxe). The VM harness runs it last, twice: with the
// device as the only one (librdmacm never learns that the last device went away; see
// srpt_release_cma), and with a second device present.
func TestDeviceRemoval(t *testing.T) {
	dev := os.Getenv("SRPT_VERBS_REMOVE_DEVICE")
	if dev == "" {
		t.Skip("destructive: set SRPT_VERBS_REMOVE_DEVICE=<rxe device> (the VM harness does)")
	}
	a := testAddrs(t)[0]
	before, err := Devices()
	require.NoError(t, err)
	netdev := netdevOf(before, dev, a)
	require.NotEmpty(t, netdev, "%s has no GID for %v with a netdev", dev, a)
	t.Logf("removing %s (netdev %s) with %d RDMA devices present", dev, netdev, len(before))

	// The oldest listener with a Logf receives the removal notices.
	logs := &logCapture{t: t}
	wild, err := Listen(netip.AddrPortFrom(netip.IPv6Unspecified(), 0), Options{Logf: logs.logf})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, wild.Close()) })
	// A wildcard AF_IB listener too (bound on soft-RoCE with the InfiniBand check bypassed):
	// RDMA CM keeps an internal listener of it on each device, which the removal must take
	// down without waiting for it.
	anyLinkLayer(t)
	wildIB, err := ListenIB(ib.IBAddr{ServiceID: ib.IBServiceID(0)}, Options{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := wildIB.Next(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the AF_IB listener outlived both removals")
		require.NoError(t, wildIB.Close())
	})

	// ---- busy
	l := newLink(t, a, defaultLinkOpts())
	_, pool := register(t, l.req.PD()) // never deregistered before the device is gone
	removed := pdRemoved(l.req.PD())
	select {
	case <-removed:
		t.Fatal("Removed is closed before the removal")
	default:
	}
	// Traffic first, so that the QPs and regions have been used.
	copy(l.ini.buf(sendOff, 64), testutil.Pattern(64, 5))
	post(t, l.ini.c, ib.SendWR{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{l.ini.sge(sendOff, 64)}})
	ibtest.Poll(t, l.tgt.c, 1)
	ibtest.Poll(t, l.ini.c, 1)
	nextErr := make(chan error, 1)
	go func() {
		_, err := l.ln.Next(context.Background())
		nextErr <- err
	}()
	// The target side sleeps in Serve (ib.Waiter), as the SRP channel does: the removal
	// ends it, without another step. A step before the removal is the consumer's (the
	// traffic's completion event may come after the first step: rxe raises it from a
	// tasklet); each step records whether the connection was released when it ran.
	tgt := l.tgt.c.(*Conn)
	served, steps := make(chan error, 1), make(chan bool, 16)
	go func() {
		served <- tgt.Serve(func(bool) bool {
			tgt.mu.Lock()
			released := tgt.phase.released()
			tgt.mu.Unlock()
			steps <- released
			return false
		})
	}()
	require.False(t, <-steps, "the first step ran on a released connection")

	linkDelete(t, dev, len(before))
	note := logs.wait(t, 1)
	require.Contains(t, note, "RDMA device removed: "+dev+"; released 2 connections, 1 listeners, "+
		"0 connection requests, 0 routes and 3 memory regions still registered")
	requireCMAClosed(t, note)
	select {
	case err := <-served:
		require.ErrorIs(t, err, ib.ErrDeviceRemoved)
	case <-time.After(waitLimit):
		t.Fatal("Serve did not return after the device's removal")
	}
	for len(steps) > 0 {
		require.False(t, <-steps, "a step after the removal")
	}

	// What the engine sees afterwards.
	for _, c := range []ib.Conn{l.tgt.c, l.ini.c} {
		waitRemoved(t, c)
		_, err := c.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpRDMAWrite}})
		require.ErrorIs(t, err, ib.ErrDeviceRemoved)
		_, err = c.PostRecv([]ib.RecvWR{{ID: 1}})
		require.ErrorIs(t, err, ib.ErrDeviceRemoved)
		n, err := c.PollCompletions(make([]ib.Completion, 4))
		require.NoError(t, err)
		require.Zero(t, n, "no flushes after removal")
		require.ErrorIs(t, c.Disconnect(), ib.ErrDeviceRemoved)
		require.NoError(t, c.Close())
	}
	select {
	case err := <-nextErr:
		require.ErrorIs(t, err, ib.ErrDeviceRemoved)
	case <-time.After(waitLimit):
		t.Fatal("Listener.Next on the device's address did not fail")
	}
	_, err = l.req.PD().RegisterMemory(l.tgt.slab.Bytes(), ib.AccessLocalWrite)
	require.ErrorIs(t, err, ib.ErrDeviceRemoved)
	select {
	case <-removed:
	default:
		t.Fatal("the protection domain's Removed is not closed")
	}
	for _, m := range []ib.MR{l.tgt.mr, l.ini.mr, pool} {
		require.NoError(t, m.Deregister(), "the removal deregistered it; the engine's Deregister succeeds")
		require.ErrorIs(t, m.Deregister(), ib.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err = wild.Next(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the wildcard listener is still open")

	linkAdd(t, dev, netdev, a)
	w := wildLogin(t, wild, a)
	require.True(t, l.req.PD() != w.req.PD(), "the device added back is a new protection domain")
	// And a listener on the device's address, new, works as before.
	l2 := newLink(t, a, defaultLinkOpts())
	copy(l2.tgt.buf(sendOff, 64), testutil.Pattern(64, 9))
	post(t, l2.tgt.c, ib.SendWR{ID: 4, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{l2.tgt.sge(sendOff, 64)}})
	got := ibtest.Poll(t, l2.ini.c, 1)
	require.Equal(t, ib.Completion{ID: 1000, ByteLen: 64, Opcode: ib.OpRecv}, got[0])
	require.Equal(t, testutil.Pattern(64, 9), l2.ini.buf(recvOff, 64))

	// ---- idle: every connection and the bound listener closed, the initiators' regions
	// deregistered; what is left on the device is the target side's region of the wildcard
	// login, like a buffer pool, and no RDMA/CM id of the engine.
	require.NoError(t, l2.ln.Close())
	for _, c := range []ib.Conn{w.tgt.c, w.ini.c, l2.tgt.c, l2.ini.c} {
		require.NoError(t, c.Close())
	}
	for _, m := range []ib.MR{w.ini.mr, l2.tgt.mr, l2.ini.mr} {
		require.NoError(t, m.Deregister())
	}
	linkDelete(t, dev, len(before))
	note = logs.wait(t, 2)
	require.Contains(t, note, "RDMA device removed: "+dev+"; released 0 connections, 0 listeners, "+
		"0 connection requests, 0 routes and 1 memory regions still registered")
	requireCMAClosed(t, note)
	require.NoError(t, w.tgt.mr.Deregister())
	linkAdd(t, dev, netdev, a)
	wildLogin(t, wild, a)
}

// requireCMAClosed checks that a removal notice says librdmacm's context of the device is
// closed: here, as a rule, or by librdmacm if it happened to re-read its device list first.
func requireCMAClosed(t *testing.T, note string) {
	t.Helper()
	if !strings.Contains(note, "librdmacm's context of the device: closed here") {
		require.Contains(t, note, "librdmacm's context of the device: closed by librdmacm")
	}
}

// pdRemoved returns the Removed channel of a verbs protection domain.
func pdRemoved(pd ib.ProtectionDomain) <-chan struct{} {
	return pd.(interface{ Removed() <-chan struct{} }).Removed()
}

// linkDelete runs rdma link delete and requires it to return within waitLimit, with nothing of
// the device left open in this process (its files, mappings and this package's context).
// There were nDevs devices before.
func linkDelete(t *testing.T, dev string, nDevs int) {
	t.Helper()
	cdev := uverbsName(t, dev)
	require.NotEmpty(t, uverbsFiles(cdev), "the device's files are open before the removal")
	start := time.Now()
	del := exec.Command("rdma", "link", "delete", dev)
	var out bytes.Buffer
	del.Stdout, del.Stderr = &out, &out
	require.NoError(t, del.Start())
	delDone := make(chan error, 1)
	go func() { delDone <- del.Wait() }()
	select {
	case err := <-delDone:
		require.NoError(t, err, "rdma link delete: %s", out.String())
		t.Logf("rdma link delete returned after %v", time.Since(start))
	case <-time.After(waitLimit):
		t.Fatalf("rdma link delete still blocked after %v; device files of this process: %q; open files:\n%s",
			waitLimit, uverbsFiles(cdev), openFiles())
	}
	require.Empty(t, uverbsFiles(cdev), "no file or mapping of the removed device is left")
	require.Eventually(t, func() bool { return openContexts.Load() == 0 }, waitLimit, 10*time.Millisecond,
		"this package's verbs context of the device is closed")
	devs, err := Devices()
	require.NoError(t, err)
	require.Len(t, devs, nDevs-1)
	for _, d := range devs {
		require.NotEqual(t, dev, d.Name)
	}
}

// linkAdd adds the rxe device back on netdev and waits for its port and a's GID.
func linkAdd(t *testing.T, dev, netdev string, a netip.Addr) {
	t.Helper()
	b, err := exec.Command("rdma", "link", "add", dev, "type", "rxe", "netdev", netdev).CombinedOutput()
	require.NoError(t, err, "rdma link add: %s", b)
	require.Eventually(t, func() bool {
		devs, err := Devices()
		return err == nil && netdevOf(devs, dev, a) == netdev && portActive(devs, dev)
	}, waitLimit, 100*time.Millisecond, "%s back with an active port and a GID for %v", dev, a)
}

// wildLogin connects to the wildcard listener on a and checks the connection with a SEND.
func wildLogin(t *testing.T, wild *Listener, a netip.Addr) *link {
	t.Helper()
	start := time.Now()
	dst := netip.AddrPortFrom(a, wild.Addr().Port())
	res := dial(t, dst, testutil.Pattern(56, 7), 0)
	r := next(t, wild)
	require.Equal(t, dst, r.LocalAddr())
	select {
	case <-pdRemoved(r.PD()):
		t.Fatal("the protection domain of a new request is Removed")
	default:
	}
	w := accept(t, wild, r, res, linkOpts{tgtDepth: 4}, 0)
	w.established(t)
	copy(w.ini.buf(sendOff, 100), testutil.Pattern(100, 8))
	post(t, w.iniConn, ib.SendWR{ID: 3, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{w.ini.sge(sendOff, 100)}})
	got := ibtest.Poll(t, w.tgt.c, 1)
	require.Equal(t, ib.Completion{ID: 0, ByteLen: 100, Opcode: ib.OpRecv}, got[0])
	require.Equal(t, testutil.Pattern(100, 8), w.tgt.buf(recvOff, 100))
	t.Logf("login to the wildcard listener %v: %v", dst, time.Since(start))
	return w
}

// waitRemoved waits for EventDeviceRemoved, skipping the events before it.
func waitRemoved(t *testing.T, c ib.Conn) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		e, ok := c.PollEvent()
		if ok && e == ib.EventDeviceRemoved {
			return
		}
		if !ok {
			select {
			case <-c.Ready():
			case <-deadline:
				t.Fatalf("%v: no EventDeviceRemoved", c)
			}
		}
	}
}

// netdevOf returns the netdev behind device's GID for a, or "".
func netdevOf(devs []DeviceInfo, device string, a netip.Addr) string {
	for _, d := range devs {
		if d.Name != device {
			continue
		}
		for _, p := range d.Ports {
			for _, g := range p.GIDs {
				if g.GID.Unmap() == a.WithZone("") && g.Netdev != "" {
					return g.Netdev
				}
			}
		}
	}
	return ""
}

func portActive(devs []DeviceInfo, device string) bool {
	for _, d := range devs {
		if d.Name == device {
			for _, p := range d.Ports {
				if p.State == PortActive {
					return true
				}
			}
		}
	}
	return false
}

// uverbsName returns the name of device's verbs character device (uverbsN).
func uverbsName(t *testing.T, device string) string {
	t.Helper()
	ents, err := os.ReadDir("/sys/class/infiniband_verbs")
	require.NoError(t, err)
	for _, e := range ents {
		b, err := os.ReadFile("/sys/class/infiniband_verbs/" + e.Name() + "/ibdev")
		if err == nil && strings.TrimSpace(string(b)) == device {
			return e.Name()
		}
	}
	t.Fatalf("no /sys/class/infiniband_verbs/*/ibdev names %s", device)
	return ""
}

// uverbsFiles lists this process's file descriptors and memory mappings of the verbs
// character device cdev (/dev/infiniband/uverbsN, " (deleted)" once the device is being
// removed): while any is left, the kernel cannot finish unregistering a device that does not
// disassociate user contexts.
func uverbsFiles(cdev string) []string {
	path := "/dev/infiniband/" + cdev
	match := func(s string) bool { return strings.HasSuffix(s, path) || strings.HasSuffix(s, path+" (deleted)") }
	var out []string
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if match(target) {
			out = append(out, "fd "+e.Name()+" -> "+target)
		}
	}
	maps, _ := os.ReadFile("/proc/self/maps")
	for _, line := range strings.Split(string(maps), "\n") {
		if match(strings.TrimSpace(line)) {
			out = append(out, "mapping "+line)
		}
	}
	return out
}

// openFiles lists this process's file descriptors and what they are.
func openFiles() string {
	var b strings.Builder
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		fmt.Fprintf(&b, "  fd %s -> %s\n", e.Name(), target)
	}
	return b.String()
}
