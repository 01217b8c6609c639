package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

var (
	testTargetAddr = netip.MustParseAddr("192.0.2.1")
	// testPortID is id_ext = ioc_guid = 0002c90300a34270, as the test configurations set it.
	testPortID        = iu.PortID{0x00, 0x02, 0xc9, 0x03, 0x00, 0xa3, 0x42, 0x70, 0x00, 0x02, 0xc9, 0x03, 0x00, 0xa3, 0x42, 0x70}
	rwInitiator       = portID(0xaaaa)
	roInitiator       = portID(0xbbbb)
	strangerInitiator = portID(0xcccc)
)

func portID(low uint64) iu.PortID {
	var p iu.PortID
	binary.BigEndian.PutUint64(p[8:], low)
	return p
}

// SCSI values the tests check.
const (
	senseIllegalRequest = 0x05
	senseUnitAttention  = 0x06
	senseDataProtect    = 0x07
)

// env is a daemon running runServe on an in-memory fabric, driven by signals sent through a
// channel, with its logs observed.
type env struct {
	t       *testing.T
	dir     string
	file    string
	fab     *memfabric.Fabric
	node    *memfabric.Node
	logs    *observer.ObservedLogs
	sigs    chan os.Signal
	reloads chan error
	served  chan error
	d       *daemon
	exits   chan int
	opts    serveOptions
}

// newEnv writes config (with DIR replaced by a temporary directory) and prepares the daemon;
// start runs it.
func newEnv(t *testing.T, config string) *env {
	t.Helper()
	e := &env{
		t:       t,
		dir:     t.TempDir(),
		fab:     memfabric.New(memfabric.Options{}),
		sigs:    make(chan os.Signal, 4),
		reloads: make(chan error, 4),
		served:  make(chan error, 1),
		exits:   make(chan int, 1),
	}
	e.file = filepath.Join(e.dir, "srptarget.yaml")
	e.writeConfig(config)
	var err error
	e.node, err = e.fab.NewNode(testTargetAddr)
	require.NoError(t, err)
	core, logs := observer.New(zapcore.DebugLevel)
	e.logs = logs
	e.opts = serveOptions{
		daemonOptions: daemonOptions{
			configFile: e.file,
			log:        zap.New(core),
			listen:     e.listen,
			devices:    func() ([]rdmaDevice, error) { return nil, errors.New("no devices in tests") },
			interfaces: func() ([]hostAddr, error) { return nil, nil },
		},
		processOptions: processOptions{shutdownTimeout: 10 * time.Second},
		signals:        e.sigs,
		exit:           func(code int) { e.exits <- code },
		afterReload:    func(err error) { e.reloads <- err },
	}
	t.Cleanup(func() { require.NoError(t, e.fab.Close()) })
	return e
}

// listen is the daemon's listen seam: the target node listens on the configured port.
func (e *env) listen(ap netip.AddrPort) (ib.Listener, error) {
	if ap.Addr() != e.node.Addr() && !ap.Addr().IsUnspecified() {
		return nil, fmt.Errorf("no device has %v", ap.Addr())
	}
	return e.node.Listen(ap.Port())
}

func (e *env) writeConfig(config string) {
	e.t.Helper()
	require.NoError(e.t, os.WriteFile(e.file, []byte(strings.ReplaceAll(config, "DIR", e.dir)), 0o600))
}

// start runs the daemon and waits until it serves.
func (e *env) start() {
	e.t.Helper()
	ready := make(chan *daemon, 1)
	e.opts.ready = func(d *daemon) { ready <- d }
	go func() { e.served <- runServe(e.opts) }()
	select {
	case e.d = <-ready:
	case err := <-e.served:
		e.t.Fatalf("the daemon did not start: %v\n%s", err, e.logText())
	case <-time.After(10 * time.Second):
		e.t.Fatal("the daemon did not start in 10 s")
	}
}

// reload sends SIGHUP and returns the reload's result.
func (e *env) reload() error {
	e.t.Helper()
	e.sigs <- syscall.SIGHUP
	select {
	case err := <-e.reloads:
		return err
	case <-time.After(10 * time.Second):
		e.t.Fatal("no reload in 10 s")
		return nil
	}
}

// stop sends sig and returns runServe's result.
func (e *env) stop(sig os.Signal) error {
	e.t.Helper()
	e.sigs <- sig
	select {
	case err := <-e.served:
		return err
	case <-time.After(20 * time.Second):
		e.t.Fatal("no shutdown in 20 s")
		return nil
	}
}

// count returns how many log entries have message msg and, for each key/value pair of kv, a
// field key whose value prints as value.
func (e *env) count(msg string, kv ...any) int {
	n := 0
	for _, l := range e.logs.FilterMessage(msg).All() {
		m := l.ContextMap()
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			if fmt.Sprint(m[kv[i].(string)]) != fmt.Sprint(kv[i+1]) {
				ok = false
			}
		}
		if ok {
			n++
		}
	}
	return n
}

func (e *env) logText() string {
	var b strings.Builder
	for _, l := range e.logs.All() {
		fmt.Fprintf(&b, "%s %s", l.Level.CapitalString(), l.Message)
		for k, v := range l.ContextMap() {
			fmt.Fprintf(&b, " %s=%v", k, v)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// login logs an initiator in through port.
func (e *env) login(id iu.PortID, src string, port uint16) (*srptest.Channel, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := srptest.Config{
		Addr:            netip.AddrPortFrom(testTargetAddr, port),
		InitiatorPortID: id,
		TargetPortID:    testPortID,
	}
	if src != "" {
		cfg.Source = netip.MustParseAddr(src)
	}
	return srptest.Login(ctx, e.fab, cfg)
}

// mustLogin logs in as login does, requires the login to succeed, and closes the channel when
// the test ends.
func (e *env) mustLogin(id iu.PortID, src string, port uint16) *srptest.Channel {
	e.t.Helper()
	ch, err := e.login(id, src, port)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { ch.Close() })
	return ch
}

func do(t *testing.T, ch *srptest.Channel, req *srptest.Request) *srptest.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rsp, err := ch.Do(ctx, req)
	require.NoError(t, err)
	return rsp
}

// write10 writes data to lun at lba with WRITE(10) and requires GOOD status.
func write10(t *testing.T, ch *srptest.Channel, lun uint16, lba uint32, data []byte, blockSize int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rsp, err := ch.Write10(ctx, lun, lba, data, blockSize)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
}

// read10 reads blocks of lun from lba with READ(10), requires GOOD status and returns the data.
func read10(t *testing.T, ch *srptest.Channel, lun uint16, lba uint32, blocks uint16, blockSize int) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rsp, err := ch.Read10(ctx, lun, lba, blocks, blockSize)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	return rsp.DataIn
}

// requireSense checks a CHECK CONDITION with the sense key, ASC and ASCQ.
func requireSense(t *testing.T, rsp *srptest.Response, key, asc, ascq uint8) {
	t.Helper()
	testutil.RequireSense(t, rsp.Status, rsp.Sense, key, asc, ascq)
}

// clearUA sends TEST UNIT READY until the LUN reports no more unit attentions.
func clearUA(t *testing.T, ch *srptest.Channel, lun uint16) {
	t.Helper()
	for range 8 {
		rsp := do(t, ch, &srptest.Request{LUN: lun, CDB: srptest.CDBTestUnitReady()})
		if rsp.Good() {
			return
		}
		k, _, _, _ := rsp.SenseKey()
		require.Equal(t, uint8(senseUnitAttention), k, "TEST UNIT READY on LUN %d: %v", lun, rsp.Err())
	}
	t.Fatalf("LUN %d keeps reporting unit attentions", lun)
}

// reportLUNs sends REPORT LUNS to LUN 0 and returns the LUN numbers (peripheral addressing).
func reportLUNs(t *testing.T, ch *srptest.Channel) []uint16 {
	t.Helper()
	cdb := make([]byte, 12)
	cdb[0] = 0xA0
	binary.BigEndian.PutUint32(cdb[6:], 4096)
	rsp := do(t, ch, &srptest.Request{LUN: 0, CDB: cdb, DataInLen: 4096})
	require.NoError(t, rsp.Err())
	require.GreaterOrEqual(t, len(rsp.DataIn), 8)
	n := binary.BigEndian.Uint32(rsp.DataIn)
	require.Zero(t, n%8)
	require.GreaterOrEqual(t, len(rsp.DataIn), 8+int(n))
	var out []uint16
	for off := 8; off < 8+int(n); off += 8 {
		out = append(out, binary.BigEndian.Uint16(rsp.DataIn[off:])&0x3FFF)
	}
	return out
}

// e2eHead is the target, listener and limits of e2eConfig, the start of other tests' files.
const e2eHead = `target:
  id_ext: "0002c90300a34270"
listeners:
  - address: 192.0.2.1
    port: 5555
limits:
  buffer_pool_size: 16MiB
`

const e2eConfig = e2eHead + `luns:
  - lun: 0
    backstore: memory
    size: 16MiB
  - lun: 1
    backstore: file
    path: DIR/lun1.img
    create: true
    size: 8MiB
acls:
  - initiators: ["0x0000000000000000000000000000aaaa"]
    luns: [0, 1]
  - sources: ["198.51.100.0/24"]
    luns: [0, 1]
    read_only: true
`

// After the reload: LUN 1 removed, LUN 2 added, a second listener.
const e2eReloadConfig = `target:
  id_ext: "0002c90300a34270"
listeners:
  - address: 192.0.2.1
    port: 5555
  - address: 192.0.2.1
    port: 5556
limits:
  buffer_pool_size: 16MiB
luns:
  - lun: 0
    backstore: memory
    size: 16MiB
  - lun: 2
    backstore: memory
    size: 4MiB
acls:
  - initiators: ["0x0000000000000000000000000000aaaa"]
    luns: [0, 2]
  - sources: ["198.51.100.0/24"]
    luns: [0, 2]
    read_only: true
`

// A configuration with two errors, on lines 7 and 10.
const e2eBadConfig = `listeners:
  - address: 192.0.2.1
    port: 5555
luns:
  - lun: 0
    backstore: memory
    size: 1000
acls:
  - initiators: ["*"]
    luns: [0, 9]
`

func TestDaemonEndToEnd(t *testing.T) {
	e := newEnv(t, e2eConfig)
	e.start()
	const bs = 512

	// Start-up logs: identity, LUNs with sizes and backstores, ACLs, listener, add_target.
	require.Equal(t, 1, e.count("target identity", "id_ext", "0002c90300a34270", "ioc_guid", "0002c90300a34270", "from", "configuration"))
	lunLogs := e.logs.FilterMessage("LUN").All()
	require.Len(t, lunLogs, 2)
	require.Equal(t, "memory", lunLogs[0].ContextMap()["backstore"])
	require.Equal(t, "16MiB", lunLogs[0].ContextMap()["size"])
	require.Equal(t, "0002c90300a342700000", lunLogs[0].ContextMap()["serial"])
	require.Equal(t, "file", lunLogs[1].ContextMap()["backstore"])
	require.Equal(t, "8MiB", lunLogs[1].ContextMap()["size"])
	require.Equal(t, filepath.Join(e.dir, "lun1.img"), lunLogs[1].ContextMap()["path"])
	require.Equal(t, 2, e.logs.FilterMessage("ACL").Len())
	require.Equal(t, 1, e.count("listening", "address", "192.0.2.1:5555"))
	require.Equal(t, 1, e.count("initiator login (on the initiator, as root)", "add_target",
		`echo "id_ext=0002c90300a34270,ioc_guid=0002c90300a34270,dest=192.0.2.1:5555" > /sys/class/infiniband_srp/srp-<dev>-<port>/add_target`))

	// The read-write initiator writes and reads both LUNs.
	rw := e.mustLogin(rwInitiator, "", 5555)
	clearUA(t, rw, 0)
	clearUA(t, rw, 1)
	ctx := context.Background()
	data0, data1 := testutil.Pattern(8*bs, 1), testutil.Pattern(8*bs, 2)
	write10(t, rw, 0, 8, data0, bs)
	write10(t, rw, 1, 8, data1, bs)
	require.Equal(t, data0, read10(t, rw, 0, 8, 8, bs))
	require.Equal(t, data1, read10(t, rw, 1, 8, 8, bs))

	// The initiator matching the read-only ACL by its source address reads the same data and
	// is refused writes with DATA PROTECT, WRITE PROTECTED.
	ro := e.mustLogin(roInitiator, "198.51.100.7", 5555)
	clearUA(t, ro, 0)
	require.Equal(t, data0, read10(t, ro, 0, 8, 8, bs))
	rsp, err := ro.Write10(ctx, 0, 8, testutil.Pattern(bs, 9), bs)
	require.NoError(t, err)
	requireSense(t, rsp, senseDataProtect, 0x27, 0x00)

	// An initiator in no ACL is refused, and the engine's log line carries the reason and the
	// ACL to add.
	_, err = e.login(strangerInitiator, "203.0.113.9", 5555)
	var rej *srptest.LoginRejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, iu.LoginRejChannelLimitReached, rej.Reason)
	rejects := e.logs.FilterMessage("login rejected").Filter(func(l observer.LoggedEntry) bool {
		return fmt.Sprint(l.ContextMap()["initiator"]) == strangerInitiator.String()
	}).All()
	require.Len(t, rejects, 1)
	require.Equal(t, iu.LoginRejChannelLimitReached.String(), rejects[0].ContextMap()["reason"])
	require.Equal(t, `initiator 0x0000000000000000000000000000cccc from 203.0.113.9 matches none of the 2 ACLs; `+
		`to let it in, add to acls: {initiators: ["0x0000000000000000000000000000cccc"], luns: [0, 1]} `+
		`(or sources: ["203.0.113.9"] instead of initiators)`, rejects[0].ContextMap()["detail"])

	// Reload: LUN 1 removed, LUN 2 added, a listener added.
	lu0 := e.d.luns[0].lu
	e.writeConfig(e2eReloadConfig)
	require.NoError(t, e.reload())
	require.Same(t, lu0, e.d.luns[0].lu, "an unchanged LUN keeps its logical unit")
	require.Equal(t, 1, e.count("configuration reloaded", "luns_added", "[2]", "luns_removed", "[1]", "luns_unchanged", "[0]", "luns_changed", "[]"))
	// The initiators get REPORTED LUNS DATA HAS CHANGED, and REPORT LUNS shows the change.
	rsp = do(t, rw, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()})
	requireSense(t, rsp, senseUnitAttention, 0x3F, 0x0E)
	require.Equal(t, []uint16{0, 2}, reportLUNs(t, rw))
	rsp = do(t, ro, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()})
	requireSense(t, rsp, senseUnitAttention, 0x3F, 0x0E)
	require.Equal(t, []uint16{0, 2}, reportLUNs(t, ro))
	// LUN 0 kept its data; LUN 1 is gone; LUN 2 works.
	require.Equal(t, data0, read10(t, rw, 0, 8, 8, bs))
	rsp = do(t, rw, &srptest.Request{LUN: 1, CDB: srptest.CDBTestUnitReady()})
	requireSense(t, rsp, senseIllegalRequest, 0x25, 0x00)
	clearUA(t, rw, 2)
	data2 := testutil.Pattern(4*bs, 3)
	write10(t, rw, 2, 0, data2, bs)
	require.Equal(t, data2, read10(t, rw, 2, 0, 4, bs))
	// The removed LUN's file was flushed and closed: it holds what was written.
	e.d.closers.Wait()
	f, err := os.ReadFile(filepath.Join(e.dir, "lun1.img"))
	require.NoError(t, err)
	require.Len(t, f, 8<<20)
	require.Equal(t, data1, f[8*bs:16*bs])
	// The new listener takes logins.
	extra, err := e.login(portID(0xdddd), "198.51.100.8", 5556)
	require.NoError(t, err)
	clearUA(t, extra, 0)
	require.NoError(t, extra.Close())

	// A bad configuration is refused as a whole, each error logged with its line.
	e.writeConfig(e2eBadConfig)
	err = e.reload()
	var errs config.Errors
	require.ErrorAs(t, err, &errs)
	var logged []string
	for _, l := range e.logs.FilterMessage("configuration error").All() {
		logged = append(logged, l.ContextMap()["error"].(string))
	}
	require.Equal(t, []string{
		e.file + ":7: luns[0].size: 1000 is not a multiple of the block size 512",
		e.file + ":10: acls[0].luns[1]: LUN 9 is not defined under luns",
	}, logged)
	require.Equal(t, 1, e.logs.FilterMessage("reload failed: the running configuration is unchanged").Len())
	require.Equal(t, []uint16{0, 2}, reportLUNs(t, rw))
	require.Equal(t, data2, read10(t, rw, 2, 0, 4, bs))

	// SIGTERM: every channel gets SRP_T_LOGOUT, runServe returns nil (exit status 0).
	require.NoError(t, e.stop(syscall.SIGTERM))
	for _, ch := range []*srptest.Channel{rw, ro} {
		select {
		case <-ch.TargetLogout():
		case <-time.After(5 * time.Second):
			t.Fatal("no SRP_T_LOGOUT")
		}
	}
	require.Equal(t, 1, e.logs.FilterMessage("every backstore flushed and closed").Len())
	require.Empty(t, e.exits)
}

func TestServeSecondSignalExitsAtOnce(t *testing.T) {
	e := newEnv(t, e2eConfig)
	got := make(chan int, 1)
	e.opts.beforeShutdown = func() {
		// The shutdown is under way: a second signal must exit at once.
		e.sigs <- os.Interrupt
		got <- <-e.exits
	}
	e.start()
	e.mustLogin(rwInitiator, "", 5555)
	require.NoError(t, e.stop(syscall.SIGTERM))
	require.Equal(t, 128+int(syscall.SIGINT), <-got)
	require.Equal(t, 1, e.count("second signal: exiting at once without finishing the shutdown", "signal", "interrupt"))
}

func TestServeStartFailureLeavesNothingOpen(t *testing.T) {
	e := newEnv(t, e2eConfig)
	// Something else listens on the port already.
	other, err := e.node.Listen(5555)
	require.NoError(t, err)
	defer other.Close()
	err = runServe(e.opts)
	require.Equal(t, exitCodeError{1}, err)
	require.Equal(t, 1, e.count("configuration error", "error",
		e.file+":4: listeners[0]: listening on 192.0.2.1:5555: memfabric: listen 192.0.2.1:5555 in RDMA_PS_TCP: address already in use"))
	require.Equal(t, 1, e.count("srptarget did not start", "errors", 1))
	// The file the configuration would have created was removed again.
	_, err = os.Stat(filepath.Join(e.dir, "lun1.img"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestServeStartFailureRemovesMadeDirectories: a file made by create: true in directories
// that did not exist takes them along when the start fails.
func TestServeStartFailureRemovesMadeDirectories(t *testing.T) {
	e := newEnv(t, strings.Replace(e2eConfig, "DIR/lun1.img", "DIR/new/deeper/lun1.img", 1))
	other, err := e.node.Listen(5555)
	require.NoError(t, err)
	defer other.Close()
	require.Equal(t, exitCodeError{1}, runServe(e.opts))
	_, err = os.Stat(filepath.Join(e.dir, "new"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(e.dir)
	require.NoError(t, err, "a directory that existed before was removed")
}
