// Package daemontest is what the daemon's tests and the commands' tests share: a daemon's
// surroundings on the in-memory fabric (its configuration file, the target's node, the
// signals it is sent, its observed log), the test configurations, and an initiator's helpers.
package daemontest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The target's address on the fabric, its port identifier and the test initiators.
var (
	TargetAddr = netip.MustParseAddr("192.0.2.1")
	// TargetPortID is id_ext = ioc_guid = 0002c90300a34270, as the test configurations set it.
	TargetPortID      = iu.PortID{0x00, 0x02, 0xc9, 0x03, 0x00, 0xa3, 0x42, 0x70, 0x00, 0x02, 0xc9, 0x03, 0x00, 0xa3, 0x42, 0x70}
	RWInitiator       = PortID(0xaaaa)
	ROInitiator       = PortID(0xbbbb)
	StrangerInitiator = PortID(0xcccc)
)

// PortID is the initiator port identifier whose low 64 bits are low.
func PortID(low uint64) iu.PortID {
	var p iu.PortID
	binary.BigEndian.PutUint64(p[8:], low)
	return p
}

// SCSI values the tests check.
const (
	SenseIllegalRequest = 0x05
	SenseUnitAttention  = 0x06
	SenseDataProtect    = 0x07
)

// Env is a daemon's surroundings in a test: its configuration file (File, in the temporary
// directory Dir), the fabric with the target's node, the signals it is sent (Sigs), the
// outcomes of its reloads (Reloads, for the daemon's afterReload hook), its end (Served), the
// exit codes it asks for (Exits) and its observed log (Log, Logs).
type Env struct {
	T       *testing.T
	Dir     string
	File    string
	Fab     *memfabric.Fabric
	Node    *memfabric.Node
	Log     *zap.Logger
	Logs    *observer.ObservedLogs
	Sigs    chan os.Signal
	Reloads chan error
	Served  chan error
	Exits   chan int
}

// New writes config (with DIR replaced by a temporary directory) and makes the fabric; the
// caller starts the daemon.
func New(t *testing.T, config string) *Env {
	t.Helper()
	e := &Env{
		T:       t,
		Dir:     t.TempDir(),
		Fab:     memfabric.New(memfabric.Options{}),
		Sigs:    make(chan os.Signal, 4),
		Reloads: make(chan error, 4),
		Served:  make(chan error, 1),
		Exits:   make(chan int, 1),
	}
	e.File = filepath.Join(e.Dir, "srptarget.yaml")
	e.WriteConfig(config)
	var err error
	e.Node, err = e.Fab.NewNode(TargetAddr)
	require.NoError(t, err)
	core, logs := observer.New(zapcore.DebugLevel)
	e.Log, e.Logs = zap.New(core), logs
	t.Cleanup(func() { require.NoError(t, e.Fab.Close()) })
	return e
}

// Listen is the daemon's listen seam: the target node listens on the configured port.
func (e *Env) Listen(ap netip.AddrPort) (ib.Listener, error) {
	if ap.Addr() != e.Node.Addr() && !ap.Addr().IsUnspecified() {
		return nil, fmt.Errorf("no device has %v", ap.Addr())
	}
	return e.Node.Listen(ap.Port())
}

// WriteConfig writes the configuration file, DIR replaced by Dir.
func (e *Env) WriteConfig(config string) {
	e.T.Helper()
	require.NoError(e.T, os.WriteFile(e.File, []byte(strings.ReplaceAll(config, "DIR", e.Dir)), 0o600))
}

// Reload sends SIGHUP and returns the reload's result.
func (e *Env) Reload() error {
	e.T.Helper()
	return e.signal(syscall.SIGHUP, e.Reloads, 10*time.Second, "reload")
}

// Stop sends sig and returns the daemon's result (Served).
func (e *Env) Stop(sig os.Signal) error {
	e.T.Helper()
	return e.signal(sig, e.Served, 20*time.Second, "shutdown")
}

// signal sends sig and returns the result of what it sets off (a reload, a shutdown) from
// results, failing the test after limit.
func (e *Env) signal(sig os.Signal, results <-chan error, limit time.Duration, what string) error {
	e.T.Helper()
	e.Sigs <- sig
	select {
	case err := <-results:
		return err
	case <-time.After(limit):
		e.T.Fatalf("no %s in %v", what, limit)
		return nil
	}
}

// Count returns how many log entries have message msg and, for each key/value pair of kv, a
// field key whose value prints as value.
func (e *Env) Count(msg string, kv ...any) int {
	n := 0
	for _, l := range e.Logs.FilterMessage(msg).All() {
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

// LogText is the log as text, for failure messages.
func (e *Env) LogText() string {
	var b strings.Builder
	for _, l := range e.Logs.All() {
		fmt.Fprintf(&b, "%s %s", l.Level.CapitalString(), l.Message)
		for k, v := range l.ContextMap() {
			fmt.Fprintf(&b, " %s=%v", k, v)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Login logs an initiator in through port.
func (e *Env) Login(id iu.PortID, src string, port uint16) (*srptest.Channel, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := srptest.Config{
		Addr:            netip.AddrPortFrom(TargetAddr, port),
		InitiatorPortID: id,
		TargetPortID:    TargetPortID,
	}
	if src != "" {
		cfg.Source = netip.MustParseAddr(src)
	}
	return srptest.Login(ctx, e.Fab, cfg)
}

// MustLogin logs in as Login does, requires the login to succeed, and closes the channel when
// the test ends. It returns once the target counts the channel in its session (it logs "login
// accepted" then): the initiator learns of the login a little earlier, when the target accepts
// the connection, and a test that asks for the sessions, or previews a reload, right away could
// otherwise miss it.
func (e *Env) MustLogin(id iu.PortID, src string, port uint16) *srptest.Channel {
	e.T.Helper()
	before := e.loginsAccepted(id)
	ch, err := e.Login(id, src, port)
	require.NoError(e.T, err)
	e.T.Cleanup(func() { ch.Close() })
	testutil.WaitFor(e.T, "the target to count the login of "+id.String(), func() bool { return e.loginsAccepted(id) > before })
	return ch
}

// loginsAccepted counts the target's "login accepted" lines for initiator id.
func (e *Env) loginsAccepted(id iu.PortID) int {
	n := 0
	for _, l := range e.Logs.FilterMessage("login accepted").All() {
		if fmt.Sprint(l.ContextMap()["initiator"]) == id.String() {
			n++
		}
	}
	return n
}

// Start runs serve on a goroutine of its own (its error goes to Served) and waits until the
// daemon says on ready that it serves; the test fails if serve returns first or after 10 s.
func Start[T any](e *Env, ready <-chan T, serve func() error) T {
	e.T.Helper()
	go func() { e.Served <- serve() }()
	select {
	case v := <-ready:
		return v
	case err := <-e.Served:
		e.T.Fatalf("the daemon did not start: %v\n%s", err, e.LogText())
	case <-time.After(10 * time.Second):
		e.T.Fatal("the daemon did not start in 10 s")
	}
	var none T // not reached: Fatal ends the test's goroutine
	return none
}

// ControlSocket is where the tests put the daemon's control socket: in a directory of Dir that
// does not exist yet, which the daemon makes.
func (e *Env) ControlSocket() string { return filepath.Join(e.Dir, "run", "control.sock") }

// LoginRW logs RWInitiator in on port 5555 and reports its power-on unit attention at LUN 0:
// the initiator most tests read and write through.
func (e *Env) LoginRW() *srptest.Channel {
	e.T.Helper()
	ch := e.MustLogin(RWInitiator, "", 5555)
	ClearUA(e.T, ch, 0)
	return ch
}

// Do sends req on ch and returns the response, within 10 s.
func Do(t *testing.T, ch *srptest.Channel, req *srptest.Request) *srptest.Response {
	t.Helper()
	return call(t, func(ctx context.Context) (*srptest.Response, error) { return ch.Do(ctx, req) })
}

// Write10 writes data to lun at lba with WRITE(10) and requires GOOD status.
func Write10(t *testing.T, ch *srptest.Channel, lun uint16, lba uint32, data []byte, blockSize int) {
	t.Helper()
	rsp := call(t, func(ctx context.Context) (*srptest.Response, error) {
		return ch.Write10(ctx, lun, lba, data, blockSize)
	})
	require.NoError(t, rsp.Err())
}

// Read10 reads blocks of lun from lba with READ(10), requires GOOD status and returns the data.
func Read10(t *testing.T, ch *srptest.Channel, lun uint16, lba uint32, blocks uint16, blockSize int) []byte {
	t.Helper()
	rsp := call(t, func(ctx context.Context) (*srptest.Response, error) {
		return ch.Read10(ctx, lun, lba, blocks, blockSize)
	})
	require.NoError(t, rsp.Err())
	return rsp.DataIn
}

// call runs op with 10 seconds to answer and requires an answer.
func call(t *testing.T, op func(context.Context) (*srptest.Response, error)) *srptest.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rsp, err := op(ctx)
	require.NoError(t, err)
	return rsp
}

// RequireSense checks a CHECK CONDITION with the sense key, ASC and ASCQ.
func RequireSense(t *testing.T, rsp *srptest.Response, key, asc, ascq uint8) {
	t.Helper()
	testutil.RequireSense(t, rsp.Status, rsp.Sense, key, asc, ascq)
}

// ClearUA sends TEST UNIT READY until the LUN reports no more unit attentions.
func ClearUA(t *testing.T, ch *srptest.Channel, lun uint16) {
	t.Helper()
	for range 8 {
		rsp := Do(t, ch, &srptest.Request{LUN: lun, CDB: srptest.CDBTestUnitReady()})
		if rsp.Good() {
			return
		}
		k, _, _, _ := rsp.SenseKey()
		require.Equal(t, uint8(SenseUnitAttention), k, "TEST UNIT READY on LUN %d: %v", lun, rsp.Err())
	}
	t.Fatalf("LUN %d keeps reporting unit attentions", lun)
}

// ReportLUNs sends REPORT LUNS to LUN 0 and returns the LUN numbers (peripheral addressing).
func ReportLUNs(t *testing.T, ch *srptest.Channel) []uint16 {
	t.Helper()
	cdb := make([]byte, 12)
	cdb[0] = 0xA0
	binary.BigEndian.PutUint32(cdb[6:], 4096)
	rsp := Do(t, ch, &srptest.Request{LUN: 0, CDB: cdb, DataInLen: 4096})
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

// E2EHead is the target, listener and limits of E2EConfig, the start of other tests' files.
const E2EHead = `target:
  id_ext: "0002c90300a34270"
listeners:
  - address: 192.0.2.1
    port: 5555
limits:
  buffer_pool_size: 16MiB
`

// E2EConfig is a memory LUN, a file LUN, an ACL by initiator and a read-only one by source.
const E2EConfig = E2EHead + `luns:
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

// E2EReloadConfig is E2EConfig after a reload: LUN 1 removed, LUN 2 added, a second listener.
const E2EReloadConfig = `target:
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

// E2EBadConfig is a configuration with two errors, on lines 7 and 10.
const E2EBadConfig = `listeners:
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

// NoIdentity is E2EConfig without target.id_ext: the identity (and the LUNs' serial
// numbers) come from the first RDMA device.
var NoIdentity = strings.Replace(E2EConfig, "target:\n  id_ext: \"0002c90300a34270\"\n", "", 1)

// twoLUNs is a configuration with LUN 0 and LUN 1 (memory), SERIAL0 and SERIAL1 replaced by
// their serial lines.
const twoLUNs = E2EHead + `luns:
  - lun: 0
    backstore: memory
    size: 1MiB
SERIAL0  - lun: 1
    backstore: memory
    size: 1MiB
SERIAL1acls:
  - initiators: ["*"]
    luns: [0, 1]
`

// WithSerials is a configuration of two memory LUNs, 0 and 1, with serials s0 and s1 (none
// when empty): the serial of LUN 0 on line 12, that of LUN 1 on line 16.
func WithSerials(s0, s1 string) string {
	line := func(s string) string {
		if s == "" {
			return ""
		}
		return "    serial: " + s + "\n"
	}
	return strings.NewReplacer("SERIAL0", line(s0), "SERIAL1", line(s1)).Replace(twoLUNs)
}
