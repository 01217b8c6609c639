package daemon

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/srptest"
)

func TestReloadFailureChangesNothing(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	e.start()
	ch := e.LoginRW()
	lu0, lu1 := e.d.luns[0].lu, e.d.luns[1].lu

	// Valid on its own, but the new listener cannot listen: the LUN it adds (a file it would
	// create) and the ACL changes must not take effect, and the file must not stay behind.
	other, err := e.Node.Listen(5557)
	require.NoError(t, err)
	defer other.Close()
	cfg := strings.Replace(daemontest.E2EConfig, "    port: 5555\n", "    port: 5555\n  - address: 192.0.2.1\n    port: 5557\n", 1)
	cfg = strings.Replace(cfg, "acls:\n", `  - lun: 3
    backstore: file
    path: DIR/lun3.img
    create: true
    size: 1MiB
acls:
`, 1)
	cfg += "  - initiators: [\"*\"]\n    luns: [3]\n"
	e.WriteConfig(cfg)
	err = e.Reload()
	require.Error(t, err)
	require.Equal(t, 1, e.Count("configuration error", "error",
		e.File+":6: listeners[1]: listening on 192.0.2.1:5557: memfabric: listen 192.0.2.1:5557 in RDMA_PS_TCP: address already in use"))
	_, err = os.Stat(filepath.Join(e.Dir, "lun3.img"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Same(t, lu0, e.d.luns[0].lu)
	require.Same(t, lu1, e.d.luns[1].lu)
	require.Len(t, e.d.luns, 2)
	require.Equal(t, []uint16{0, 1}, daemontest.ReportLUNs(t, ch))
	// No REPORTED LUNS DATA HAS CHANGED: nothing changed.
	rsp := daemontest.Do(t, ch, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()})
	require.NoError(t, rsp.Err())
	// The ACL for everyone did not take effect either.
	_, err = e.Login(daemontest.StrangerInitiator, "203.0.113.9", 5555)
	var rej *srptest.LoginRejectedError
	require.ErrorAs(t, err, &rej)

	// Changes a running engine cannot take are refused with their lines.
	cfg = strings.Replace(daemontest.E2EConfig, `id_ext: "0002c90300a34270"`, `id_ext: "0002c90300a34271"`, 1)
	cfg = strings.Replace(cfg, "buffer_pool_size: 16MiB", "buffer_pool_size: 16MiB\n  credits: 64", 1)
	e.WriteConfig(cfg)
	var errs config.Errors
	require.ErrorAs(t, e.Reload(), &errs)
	require.Equal(t, []string{
		e.File + ":1: target: the target identity cannot change while running (id_ext=0002c90300a34270 ioc_guid=0002c90300a34270, from the configuration): restart srptarget to change it",
		e.File + ":8: limits.credits: limits cannot change while running (running with 128): restart srptarget to change them",
	}, errStrings(errs))
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

func errStrings(errs config.Errors) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	return out
}

// reloadNewLU0 reloads daemontest.E2EConfig with setting added to LUN 0, a change that makes
// a new logical unit, and requires that the new one is over the same backstore.
func (e *env) reloadNewLU0(setting string) {
	e.T.Helper()
	lu0, store0 := e.d.luns[0].lu, e.d.luns[0].store
	e.WriteConfig(strings.Replace(daemontest.E2EConfig, "    size: 16MiB\n", "    size: 16MiB\n    "+setting+"\n", 1))
	require.NoError(e.T, e.Reload())
	require.NotSame(e.T, lu0, e.d.luns[0].lu)
	require.Same(e.T, store0, e.d.luns[0].store)
}

func TestReloadChangedLUNKeepsItsBackstore(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	e.start()
	ch := e.LoginRW()
	ctx := context.Background()
	data := testutil.Pattern(4096, 5)
	daemontest.Write10(t, ch, 0, 0, data, 512)

	// A new vendor string makes a new logical unit over the same memory.
	e.reloadNewLU0("vendor: NEWVEND")
	require.Equal(t, 1, e.Count("configuration reloaded", "luns_changed", "[0]", "luns_unchanged", "[1]"))
	daemontest.ClearUA(t, ch, 0)
	rsp, err := ch.Inquiry(ctx, 0, false, 0, 36)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Equal(t, "NEWVEND ", string(rsp.DataIn[8:16]))
	require.Equal(t, data, daemontest.Read10(t, ch, 0, 0, 8, 512))

	// Removing the initiator's ACL disconnects it.
	e.WriteConfig(strings.Replace(daemontest.E2EConfig, `["0x0000000000000000000000000000aaaa"]`, `["0x0000000000000000000000000000eeee"]`, 1))
	require.NoError(t, e.Reload())
	select {
	case <-ch.Disconnected():
	case <-time.After(5 * time.Second):
		t.Fatal("the initiator whose ACL was removed is still connected")
	}
	require.NoError(t, e.Stop(syscall.SIGINT))
}

// TestReloadRemoveAndReAddLUN: a reload removes the file LUN 1, the next one adds it back. The
// removed unit retires on its own goroutine, so its backstore must leave the daemon's stores at
// once: the second reload opens the file afresh instead of reusing a store that is closing,
// and reads back what was written before the removal.
func TestReloadRemoveAndReAddLUN(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	e.start()
	ch := e.LoginRW()
	daemontest.ClearUA(t, ch, 1)
	data := testutil.Pattern(4096, 9)
	daemontest.Write10(t, ch, 1, 0, data, 512)
	store1 := e.d.luns[1].store

	without1 := strings.Replace(daemontest.E2EConfig, "  - lun: 1\n    backstore: file\n    path: DIR/lun1.img\n    create: true\n    size: 8MiB\n", "", 1)
	without1 = strings.ReplaceAll(without1, "luns: [0, 1]", "luns: [0]")
	require.NotEqual(t, daemontest.E2EConfig, without1)
	e.WriteConfig(without1)
	require.NoError(t, e.Reload())
	require.Equal(t, 1, e.Count("configuration reloaded", "luns_removed", "[1]"))
	for _, s := range e.d.stores {
		require.NotSame(t, store1, s, "the removed LUN's backstore is still offered to later reloads")
	}

	e.WriteConfig(daemontest.E2EConfig)
	require.NoError(t, e.Reload())
	require.NotSame(t, store1, e.d.luns[1].store)
	daemontest.ClearUA(t, ch, 1)
	require.Equal(t, data, daemontest.Read10(t, ch, 1, 0, 8, 512))
	require.NoError(t, e.Stop(syscall.SIGINT))
}

// poolAndMemoryLUN0 is the limits and the LUNs of a configuration with one small memory LUN.
const poolAndMemoryLUN0 = `limits:
  buffer_pool_size: 16MiB
luns:
  - lun: 0
    backstore: memory
    size: 1MiB
`

// aluaConfig has two target ports, relative ports 1 and 2, in groups 1 and 2, and a remote
// port 3 in group 2. STATE1 and STATE2 are the groups' states.
const aluaConfig = `target:
  id_ext: "0002c90300a34270"
  ports:
    - id_ext: "0002c90300a34271"
      relative_port_id: 2
listeners:
  - address: 192.0.2.1
    port: 5555
` + poolAndMemoryLUN0 + `acls:
  - initiators: ["*"]
    luns: [0]
alua:
  groups:
    - id: 1
      state: STATE1
      ports: [1]
    - id: 2
      state: STATE2
      ports: [2, 3]
`

func aluaStates(s1, s2 string) string {
	return strings.NewReplacer("STATE1", s1, "STATE2", s2).Replace(aluaConfig)
}

// TestReloadChangesPortGroupStates logs one initiator in through both target ports, checks
// what each path sees, then reloads with the states swapped: both paths get ASYMMETRIC ACCESS
// STATE CHANGED, and the I/O that worked on one path now works on the other.
func TestReloadChangesPortGroupStates(t *testing.T) {
	e := newEnv(t, aluaStates("active/optimized", "standby"))
	e.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var chans [2]*srptest.Channel
	for i := range chans {
		tp := daemontest.TargetPortID
		tp[7] += byte(i) // 0002c90300a34270, then 0002c90300a34271
		ch, err := srptest.Login(ctx, e.Fab, srptest.Config{Addr: netip.AddrPortFrom(daemontest.TargetAddr, 5555),
			InitiatorPortID: daemontest.RWInitiator, TargetPortID: tp})
		require.NoError(t, err)
		defer ch.Close()
		chans[i] = ch
		rsp := daemontest.Do(t, ch, &srptest.Request{CDB: srptest.CDBTestUnitReady()})
		daemontest.RequireSense(t, rsp, daemontest.SenseUnitAttention, 0x29, 0x00)
	}
	a, b := chans[0], chans[1]
	read := &srptest.Request{CDB: srptest.CDBRead10(0, 1), DataInLen: 512}
	require.NoError(t, daemontest.Do(t, a, read).Err())
	daemontest.RequireSense(t, daemontest.Do(t, b, read), 0x02, 0x04, 0x0B)

	// Both paths: TPGS 01b and the same REPORT TARGET PORT GROUPS, each its own port in VPD 0x83.
	rtpg := []byte{0xA3, 0x2A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}
	for i, ch := range chans {
		rsp := daemontest.Do(t, ch, &srptest.Request{CDB: srptest.CDBInquiry(false, 0, 96), DataInLen: 96})
		require.NoError(t, rsp.Err())
		require.Equal(t, byte(0x10), rsp.DataIn[5]&0x30, "TPGS 01b")
		rsp = daemontest.Do(t, ch, &srptest.Request{CDB: rtpg, DataInLen: 256})
		require.NoError(t, rsp.Err())
		require.Equal(t, []byte{0, 0, 0, 32, 0x10, 0, 0, 0,
			0x00, 0x8F, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1,
			0x02, 0x8F, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3}, rsp.DataIn)
		rsp = daemontest.Do(t, ch, &srptest.Request{CDB: srptest.CDBInquiry(true, 0x83, 512), DataInLen: 512})
		require.NoError(t, rsp.Err())
		require.Contains(t, string(rsp.DataIn), string([]byte{0x01, 0x14, 0, 4, 0, 0, 0, byte(i + 1)}))
		require.Contains(t, string(rsp.DataIn), string([]byte{0x01, 0x15, 0, 4, 0, 0, 0, byte(i + 1)}))
	}

	// A target port cannot be added by a reload.
	e.WriteConfig(strings.Replace(aluaStates("active/optimized", "standby"), "relative_port_id: 2", "relative_port_id: 3\n    - {id_ext: \"0002c90300a34272\", relative_port_id: 2}", 1))
	err := e.Reload()
	require.ErrorContains(t, err, "target ports cannot change while running")

	e.WriteConfig(aluaStates("unavailable", "active/optimized"))
	require.NoError(t, e.Reload())
	require.Equal(t, 1, e.Count("asymmetric access states changed: ASYMMETRIC ACCESS STATE CHANGED pending for every initiator"))
	for _, ch := range chans {
		daemontest.RequireSense(t, daemontest.Do(t, ch, read), daemontest.SenseUnitAttention, 0x2A, 0x06)
	}
	daemontest.RequireSense(t, daemontest.Do(t, a, read), 0x02, 0x04, 0x0C)
	require.NoError(t, daemontest.Do(t, b, read).Err())
	rsp := daemontest.Do(t, a, &srptest.Request{CDB: rtpg, DataInLen: 256})
	require.NoError(t, rsp.Err())
	require.Equal(t, []byte{0x03, 0x8F, 0, 1, 0, 0x02, 0, 1}, rsp.DataIn[8:16])
	require.Equal(t, []byte{0x00, 0x8F, 0, 2, 0, 0x02, 0, 2}, rsp.DataIn[20:28])

	// The same states again: no unit attention.
	require.NoError(t, e.Reload())
	require.NoError(t, daemontest.Do(t, b, read).Err())
	require.NoError(t, e.Stop(syscall.SIGINT))
}

func TestPortGroupChanges(t *testing.T) {
	old := []scsi.PortGroup{
		{ID: 1, State: scsi.ActiveOptimized, Preferred: true, Ports: []uint16{1}},
		{ID: 2, State: scsi.Standby, Ports: []uint16{2, 3}},
		{ID: 4, State: scsi.Unavailable, Ports: []uint16{4}},
	}
	new := []scsi.PortGroup{
		{ID: 3, State: scsi.Transitioning, Ports: []uint16{4}},
		{ID: 2, State: scsi.ActiveOptimized, Ports: []uint16{2, 3}},
		{ID: 1, State: scsi.ActiveOptimized, Preferred: true, Ports: []uint16{1}},
	}
	require.Equal(t, []string{
		"group 2: standby, ports [2 3] -> active/optimized, ports [2 3]",
		"group 3: added (transitioning, ports [4])",
		"group 4: removed (was unavailable, ports [4])",
	}, portGroupChanges(old, new))
	require.Equal(t, []string{}, portGroupChanges(old, old))
}
