package main

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/srptest"
)

// newControlEnv is newEnv with the control socket in a directory that does not exist yet.
func newControlEnv(t *testing.T, config string) *env {
	t.Helper()
	e := newEnv(t, config)
	e.opts.ControlPath = e.ControlSocket()
	return e
}

// ctl runs an srptarget command against e's control socket.
func (e *env) ctl(args ...string) (string, string, error) {
	e.T.Helper()
	return run(e.T, noDeps, append(args, "--control", e.opts.ControlPath)...)
}

// ctlJSON runs a command with --json and decodes the answer's result into v.
func (e *env) ctlJSON(v any, args ...string) {
	e.T.Helper()
	out, errOut, err := e.ctl(append(args, "--json")...)
	require.NoError(e.T, err, errOut)
	var rsp struct {
		Version int             `json:"version"`
		OK      bool            `json:"ok"`
		Result  json.RawMessage `json:"result"`
	}
	require.NoError(e.T, json.Unmarshal([]byte(out), &rsp), out)
	require.Equal(e.T, control.Version, rsp.Version)
	require.True(e.T, rsp.OK)
	require.NoError(e.T, json.Unmarshal(rsp.Result, v), out)
}

// stats returns the counters of srptarget stats --json by name.
func (e *env) stats() map[string]int64 {
	e.T.Helper()
	var stats []control.StatEntry
	e.ctlJSON(&stats, "stats")
	byName := map[string]int64{}
	for _, s := range stats {
		byName[s.Name] = s.Value
	}
	return byName
}

// exitCode is the status main exits with for err.
func exitCode(err error) int {
	var ec exitCodeError
	switch {
	case err == nil:
		return 0
	case errorsAs(err, &ec):
		return ec.Code
	}
	return 1
}

func errorsAs(err error, ec *exitCodeError) bool {
	e, ok := err.(exitCodeError)
	if ok {
		*ec = e
	}
	return ok
}

func TestControlSocketFileModesAndRemoval(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	fi, err := os.Lstat(e.opts.ControlPath)
	require.NoError(t, err)
	require.Equal(t, os.ModeSocket, fi.Mode().Type())
	require.Equal(t, os.FileMode(0o660), fi.Mode().Perm())
	di, err := os.Stat(filepath.Dir(e.opts.ControlPath))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o750), di.Mode().Perm())
	require.NoError(t, e.Stop(syscall.SIGTERM))
	_, err = os.Lstat(e.opts.ControlPath)
	require.ErrorIs(t, err, os.ErrNotExist, "the socket is removed at shutdown")
}

func TestControlSocketGroup(t *testing.T) {
	gid := os.Getgid()
	e := newControlEnv(t, daemontest.E2EConfig)
	e.opts.ControlGroup = strconv.Itoa(gid)
	e.start()
	for _, p := range []string{e.opts.ControlPath, filepath.Dir(e.opts.ControlPath)} {
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		require.Equal(t, uint32(gid), fi.Sys().(*syscall.Stat_t).Gid, p)
	}
	require.NoError(t, e.Stop(syscall.SIGTERM))

	e = newControlEnv(t, daemontest.E2EConfig)
	e.opts.ControlGroup = "no-such-group-srptarget"
	require.Equal(t, exitCodeError{Code: 1}, daemon.Serve(e.opts))
	require.Contains(t, e.LogText(), `control socket: group "no-such-group-srptarget": group: unknown group no-such-group-srptarget`)
}

func TestControlSocketStaleReplacedLiveRefused(t *testing.T) {
	// A socket file nobody answers on (a daemon killed with SIGKILL) is replaced.
	e := newControlEnv(t, daemontest.E2EConfig)
	require.NoError(t, os.MkdirAll(filepath.Dir(e.opts.ControlPath), 0o750))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: e.opts.ControlPath, Net: "unix"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	e.start()
	_, _, err = e.ctl("status")
	require.NoError(t, err)
	require.Equal(t, 1, e.Count("replaced a stale control socket"))

	// A second daemon on the same socket does not start.
	e2 := newEnv(t, strings.ReplaceAll(daemontest.E2EConfig, "5555", "5557"))
	e2.opts.ControlPath = e.opts.ControlPath
	e2.opts.Ready = func() { t.Error("the second daemon started") }
	require.Equal(t, exitCodeError{Code: 1}, daemon.Serve(e2.opts))
	require.Contains(t, e2.LogText(), "another process (a second srptarget?) answers on it")
	require.NoError(t, e.Stop(syscall.SIGTERM))

	// Something that is not a socket is left alone.
	require.NoError(t, os.WriteFile(e.opts.ControlPath, []byte("x"), 0o600))
	e3 := newEnv(t, daemontest.E2EConfig)
	e3.opts.ControlPath = e.opts.ControlPath
	require.Equal(t, exitCodeError{Code: 1}, daemon.Serve(e3.opts))
	require.Contains(t, e3.LogText(), "exists and is not a socket")
}

// times and QP numbers change from run to run.
var unstable = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|QP \d+|pid \d+|up \S+|channel \d+|:4\d{4}`)

func TestControlStatusSessionsLUNsStats(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	before := time.Now().UTC().Add(-time.Second)
	rw := e.LoginRW()
	ro := e.MustLogin(daemontest.ROInitiator, "198.51.100.7", 5555)
	daemontest.ClearUA(t, ro, 0)

	e.waitQuiet()
	var st control.StatusInfo
	e.ctlJSON(&st, "status")
	require.Equal(t, version, st.Version)
	require.Equal(t, build, st.Build)
	require.Equal(t, os.Getpid(), st.PID)
	require.Equal(t, e.File, st.Config)
	require.Equal(t, "0002c90300a34270", st.IDExt)
	require.Equal(t, "0002c90300a34270", st.IOCGUID)
	require.Equal(t, []control.ListenerInfo{{Address: "192.0.2.1:5555", State: "listening"}}, st.Listeners)
	require.Equal(t, "no devices in tests", st.DevicesError)
	require.Equal(t, int64(16<<20), st.BufferPoolSize)
	require.Zero(t, st.BufferPoolInUse)
	require.Equal(t, 2, st.Sessions)
	require.Equal(t, 2, st.Channels)
	require.Zero(t, st.CommandsInFlight)
	// limits.backstore_io is auto: io_uring where this host lets the tests use it
	ioLine := "backstore I/O: io_uring"
	if engine, why := srp.ResolveBackstoreIO(srp.BackstoreIOAuto); why != nil {
		require.Equal(t, srp.BackstoreIOSync, engine)
		require.Equal(t, "io_uring does not work here: "+why.Error(), st.BackstoreIONote)
		ioLine = "backstore I/O: sync (" + st.BackstoreIONote + ")"
	} else {
		require.Empty(t, st.BackstoreIONote)
	}
	out, _, err := e.ctl("status")
	require.NoError(t, err)
	require.Equal(t, `srptarget `+version+`, pid 1, up 1 (since 2026-01-01T00:00:00Z)
config: `+e.File+`
`+ioLine+`
target: id_ext=0002c90300a34270 ioc_guid=0002c90300a34270 (from the configuration)
listeners:
  192.0.2.1:5555: listening
RDMA devices: unknown (no devices in tests)
buffer pool: 0 bytes in use of 16 MiB
sessions: 2, channels: 2, commands in flight: 0
`, normalize(out))

	var ss []control.SessionInfo
	e.ctlJSON(&ss, "sessions")
	require.Len(t, ss, 2)
	for i := range ss {
		require.False(t, ss[i].LoginTime.Before(before), "login time %v", ss[i].LoginTime)
		require.Len(t, ss[i].Channels, 1)
		c := &ss[i].Channels[0]
		require.NotZero(t, c.QPNum)
		require.NotZero(t, c.ID)
		require.Equal(t, ss[i].LoginTime, c.LoginTime)
		require.Equal(t, 128, c.Credits)
		require.Positive(t, c.CreditsHeld)
		ss[i].LoginTime, c.LoginTime, c.QPNum, c.ID, c.CreditsHeld = time.Time{}, time.Time{}, 0, 0, 0
		ss[i].IO, ss[i].LUNIO = control.IOCounts{}, nil // TestPerInitiatorStats checks them
	}
	rwSrc := rw.Conn().LocalAddr()
	require.Equal(t, []control.SessionInfo{
		{
			Initiator: daemontest.RWInitiator.String(),
			Sources:   []string{rwSrc.Addr().String()},
			ACL:       &control.ACLRef{Index: 0, Name: "acls[0]", Description: "initiators 0x0000000000000000000000000000aaaa"},
			LUNs:      []control.LUNRef{{LUN: 0}, {LUN: 1}},
			Channels:  []control.ChannelInfo{{Source: rwSrc.String(), Credits: 128}},
		},
		{
			Initiator: daemontest.ROInitiator.String(),
			Sources:   []string{"198.51.100.7"},
			ACL:       &control.ACLRef{Index: 1, Name: "acls[1]", Description: "sources 198.51.100.0/24, read-only"},
			LUNs:      []control.LUNRef{{LUN: 0, ReadOnly: true}, {LUN: 1, ReadOnly: true}},
			Channels:  []control.ChannelInfo{{Source: ro.Conn().LocalAddr().String(), Credits: 128}},
		},
	}, ss)
	out, _, err = e.ctl("sessions")
	require.NoError(t, err)
	// clearUA's two TEST UNIT READYs on LUN 0: the unit attention, then GOOD.
	ago := regexp.MustCompile(`\([0-9][^)]* ago\)`)
	require.Equal(t, normalize(`initiator 0x0000000000000000000000000000aaaa from `+rwSrc.Addr().String()+`, admitted by acls[0] (initiators 0x0000000000000000000000000000aaaa), logged in 2026-01-01T00:00:00Z, 0 commands in flight
  LUNs: 0, 1
  I/O: 2 commands, 0 bytes read, 0 bytes written, 1 error, last active 2026-01-01T00:00:00Z (N ago)
    LUN 0: 2 commands, 0 bytes read, 0 bytes written, 1 error, last active 2026-01-01T00:00:00Z (N ago)
  channel 1: `+rwSrc.String()+`, QP 1, credits 128 (initiator holds 128), 0 commands in flight, logged in 2026-01-01T00:00:00Z
initiator 0x0000000000000000000000000000bbbb from 198.51.100.7, admitted by acls[1] (sources 198.51.100.0/24, read-only), logged in 2026-01-01T00:00:00Z, 0 commands in flight
  LUNs: 0 (read-only), 1 (read-only)
  I/O: 2 commands, 0 bytes read, 0 bytes written, 1 error, last active 2026-01-01T00:00:00Z (N ago)
    LUN 0: 2 commands, 0 bytes read, 0 bytes written, 1 error, last active 2026-01-01T00:00:00Z (N ago)
  channel 1: `+ro.Conn().LocalAddr().String()+`, QP 1, credits 128 (initiator holds 128), 0 commands in flight, logged in 2026-01-01T00:00:00Z
`), ago.ReplaceAllString(normalize(out), "(N ago)"))

	var ls []control.LUNInfo
	e.ctlJSON(&ls, "luns")
	both := []string{daemontest.RWInitiator.String(), daemontest.ROInitiator.String()}
	require.ElementsMatch(t, both, ls[0].Sessions)
	require.ElementsMatch(t, both, ls[1].Sessions)
	ls[0].Sessions, ls[1].Sessions = nil, nil
	require.Len(t, ls[0].Initiators, 2, "both did clearUA on LUN 0")
	require.Empty(t, ls[1].Initiators)
	require.Equal(t, uint64(4), ls[0].IO.Commands)
	ls[0].IO, ls[0].Initiators, ls[1].Initiators = control.IOCounts{}, nil, nil // TestPerInitiatorStats checks them
	require.Equal(t, []control.LUNInfo{
		{LUN: 0, Backstore: "memory", Size: 16 << 20, BlockSize: 512, WriteCache: true, ThinProvisioning: true, Serial: "0002c90300a342700000"},
		{LUN: 1, Backstore: "file", Path: filepath.Join(e.Dir, "lun1.img"), Size: 8 << 20, BlockSize: 512, WriteCache: true, ThinProvisioning: true, Serial: "0002c90300a342700001"},
	}, ls)
	out, _, err = e.ctl("luns")
	require.NoError(t, err)
	require.Contains(t, out, "LUN 0: memory, 16 MiB, 512-byte blocks, serial 0002c90300a342700000, write cache, thin\n  used by 0x")
	require.Contains(t, out, "LUN 1: file "+filepath.Join(e.Dir, "lun1.img")+", 8 MiB, 512-byte blocks, serial 0002c90300a342700001, write cache, thin\n")

	got := e.stats()
	require.Equal(t, int64(2), got["logins_accepted"])
	require.Equal(t, int64(2), got["channels_open"])
	require.Positive(t, got["commands"])
	require.Contains(t, got, "logins_rejected_channel_limit_reached")
	out, _, err = e.ctl("stats")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^logins_accepted +2$`, out)
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// waitQuiet waits until every channel has published that its commands are done and its
// credits are back (the channel goroutine does once per pass of its loop, after the initiator
// may have seen the response).
func (e *env) waitQuiet() {
	e.T.Helper()
	require.Eventually(e.T, func() bool {
		var ss []control.SessionInfo
		e.ctlJSON(&ss, "sessions")
		for _, s := range ss {
			for _, c := range s.Channels {
				if c.CommandsInFlight != 0 || c.CreditsHeld != int64(c.Credits) {
					return false
				}
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)
}

// normalize replaces what changes from run to run with fixed values.
func normalize(s string) string {
	return unstable.ReplaceAllStringFunc(s, func(m string) string {
		switch {
		case strings.HasPrefix(m, "QP "):
			return "QP 1"
		case strings.HasPrefix(m, "pid "):
			return "pid 1"
		case strings.HasPrefix(m, "up "):
			return "up 1"
		case strings.HasPrefix(m, "channel "):
			return "channel 1"
		case strings.HasPrefix(m, ":4"):
			return ":40000"
		}
		return "2026-01-01T00:00:00Z"
	})
}

func TestControlReload(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	rw := e.LoginRW()
	require.Equal(t, []uint16{0, 1}, daemontest.ReportLUNs(t, rw))

	// The dry run shows LUN 2 added and LUN 1 retired, and applies nothing: no file made, no
	// listener opened, no unit attention, the same LUNs. (LUN 3's directory must exist: only
	// under the daemon's state directory does serve make missing ones.)
	require.NoError(t, os.Mkdir(filepath.Join(e.Dir, "new"), 0o700))
	e.WriteConfig(strings.Replace(daemontest.E2EReloadConfig, "acls:", `  - lun: 3
    backstore: file
    path: DIR/new/lun3.img
    create: true
    size: 1MiB
acls:`, 1))
	var res control.ReloadResult
	e.ctlJSON(&res, "reload", "--dry-run")
	require.Equal(t, control.ReloadResult{
		DryRun:            true,
		LUNsAdded:         []int{2, 3},
		LUNsChanged:       []int{},
		LUNsRemoved:       []int{1},
		LUNsUnchanged:     []int{0},
		ListenersAdded:    []string{"192.0.2.1:5556"},
		ListenersRemoved:  []string{},
		Sessions:          []control.SessionChange{{Initiator: daemontest.RWInitiator.String(), LosesLUNs: []int{1}, GainsLUNs: []int{2}}},
		PortGroupsChanged: []string{},
		LUNChanges:        []control.LUNChange{},
		ACLChanges: []control.ACLChange{
			{ACL: "acls[0]", Change: "changed", Fields: []control.FieldChange{{Key: "luns", From: "[0, 1]", To: "[0, 2]"}}},
			{ACL: "acls[1]", Change: "changed", Fields: []control.FieldChange{{Key: "luns", From: "[0, 1]", To: "[0, 2]"}}},
		},
		DataLoss: []string{},
	}, normalizeNil(res))
	// The changes as both the dry run and the reload print them, but for the LUNs added: the
	// dry run's configuration adds LUN 3 too.
	changes := func(added string) string {
		return "  LUNs added: " + added + `
  LUNs changed: none
  LUNs retired: 1
  LUNs unchanged: 0
  acls[0]:
    luns: [0, 1] -> [0, 2]
  acls[1]:
    luns: [0, 1] -> [0, 2]
  listeners added: 192.0.2.1:5556
  listeners removed: none
  target port groups: unchanged
  initiator 0x0000000000000000000000000000aaaa: loses LUNs 1, gains LUNs 2
`
	}
	out, _, err := e.ctl("reload", "--dry-run")
	require.NoError(t, err)
	require.Equal(t, "dry run: nothing applied; the reload would change:\n"+changes("2, 3"), out)
	_, err = os.Stat(filepath.Join(e.Dir, "new", "lun3.img"))
	require.ErrorIs(t, err, os.ErrNotExist, "a dry run makes no file")
	require.True(t, daemontest.Do(t, rw, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()}).Good(), "no unit attention")
	require.Equal(t, []uint16{0, 1}, daemontest.ReportLUNs(t, rw))
	var ls []control.LUNInfo
	e.ctlJSON(&ls, "luns")
	require.Len(t, ls, 2)
	require.Equal(t, 1, ls[1].LUN)
	var st control.StatusInfo
	e.ctlJSON(&st, "status")
	require.Len(t, st.Listeners, 1)
	require.Zero(t, e.Count("configuration reloaded"))

	// The reload applies it: the initiator sees LUN 2.
	e.WriteConfig(daemontest.E2EReloadConfig)
	out, errOut, err := e.ctl("reload")
	require.NoError(t, err, errOut)
	require.Equal(t, "reload applied:\n"+changes("2"), out)
	rsp := daemontest.Do(t, rw, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()})
	daemontest.RequireSense(t, rsp, daemontest.SenseUnitAttention, 0x3F, 0x0E)
	require.Equal(t, []uint16{0, 2}, daemontest.ReportLUNs(t, rw))
	require.Equal(t, 1, e.Count("configuration reloaded", "luns_added", "[2]", "luns_removed", "[1]"))

	// A refused reload exits 1 with every error, as the log has them; so does its dry run.
	e.WriteConfig(daemontest.E2EBadConfig)
	want := e.File + ":7: luns[0].size: 1000 is not a multiple of the block size 512\n" +
		e.File + ":10: acls[0].luns[1]: LUN 9 is not defined under luns\n"
	out, errOut, err = e.ctl("reload")
	require.Equal(t, 1, exitCode(err))
	require.Empty(t, out)
	require.Equal(t, want+"reload refused: 2 errors; the running configuration is unchanged\n", errOut)
	out, errOut, err = e.ctl("reload", "--dry-run")
	require.Equal(t, 1, exitCode(err))
	require.Empty(t, out)
	require.Equal(t, want+"the reload would be refused: 2 errors; the running configuration is unchanged\n", errOut)
	require.Equal(t, 1, e.Logs.FilterMessage("reload failed: the running configuration is unchanged").Len(), "the dry run logs no failure")
	require.Equal(t, []uint16{0, 2}, daemontest.ReportLUNs(t, rw))

	// SIGHUP still reloads.
	e.WriteConfig(daemontest.E2EConfig)
	require.NoError(t, e.Reload())
	require.Equal(t, 2, e.Logs.FilterMessage("configuration reloaded").Len())
	// Counted for srptarget stats: two applied (socket, SIGHUP), one refused, dry runs not.
	counts := e.stats()
	require.Equal(t, int64(2), counts["reloads_applied"])
	require.Equal(t, int64(1), counts["reloads_failed"])
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// normalizeNil makes the empty lists of a decoded reload result comparable.
func normalizeNil(r control.ReloadResult) control.ReloadResult {
	if r.Sessions == nil {
		r.Sessions = []control.SessionChange{}
	}
	return r
}

func TestControlReloadDisconnects(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	e.MustLogin(daemontest.ROInitiator, "198.51.100.7", 5555)
	// Without the sources ACL the read-only initiator is refused.
	e.WriteConfig(strings.Replace(daemontest.E2EConfig, `  - sources: ["198.51.100.0/24"]
    luns: [0, 1]
    read_only: true
`, "", 1))
	var res control.ReloadResult
	e.ctlJSON(&res, "reload", "--dry-run")
	require.Equal(t, []control.SessionChange{{Initiator: daemontest.ROInitiator.String(), LosesLUNs: []int{0, 1}, Disconnected: true, ChannelsDisconnected: 1}}, res.Sessions)
	out, _, err := e.ctl("reload", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "  initiator 0x0000000000000000000000000000bbbb: disconnected (no ACL admits it), loses LUNs 0, 1\n")
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

func TestControlACLCheck(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	var res control.ACLCheckResult
	e.ctlJSON(&res, "acl-check", "--initiator", daemontest.RWInitiator.String())
	require.Equal(t, control.ACLCheckResult{
		From: "daemon", Initiator: daemontest.RWInitiator.String(),
		ACL:  &control.ACLRef{Index: 0, Name: "acls[0]", Description: "initiators 0x0000000000000000000000000000aaaa"},
		LUNs: []control.LUNRef{{LUN: 0}, {LUN: 1}},
	}, res)
	out, _, err := e.ctl("acl-check", "--initiator", daemontest.StrangerInitiator.String(), "--source", "198.51.100.9")
	require.NoError(t, err)
	require.Equal(t, `answered by the daemon on `+e.opts.ControlPath+` (the running configuration)
initiator 0x0000000000000000000000000000cccc from 198.51.100.9: admitted by acls[1] (sources 198.51.100.0/24, read-only)
LUNs: 0 (read-only), 1 (read-only)
`, out)
	out, _, err = e.ctl("acl-check", "--initiator", daemontest.StrangerInitiator.String(), "--source", "203.0.113.9")
	require.Equal(t, 1, exitCode(err))
	require.Contains(t, out, "initiator 0x0000000000000000000000000000cccc from 203.0.113.9: no ACL admits it, its logins are refused\n"+
		`initiator 0x0000000000000000000000000000cccc from 203.0.113.9 matches none of the 2 ACLs; to let it in`)
	_, _, err = e.ctl("acl-check", "--initiator", "0x1234")
	require.ErrorContains(t, err, `initiator "0x1234": want 0x and 32 hex digits`)
	require.NoError(t, e.Stop(syscall.SIGTERM))

	// No daemon: from --config, said so; without --config, an error that says what to check.
	out, errOut, err := e.ctl("acl-check", "--initiator", daemontest.StrangerInitiator.String(), "--source", "198.51.100.9", "--config", e.File)
	require.NoError(t, err)
	require.Equal(t, "no daemon answers on "+e.opts.ControlPath+": answering from "+e.File+"\n", errOut)
	require.Equal(t, `answered from `+e.File+` (no daemon)
initiator 0x0000000000000000000000000000cccc from 198.51.100.9: admitted by acls[1] (sources 198.51.100.0/24, read-only)
LUNs: 0 (read-only), 1 (read-only)
`, out)
	_, _, err = e.ctl("acl-check", "--initiator", daemontest.RWInitiator.String())
	require.ErrorContains(t, err, "cannot reach the daemon on "+e.opts.ControlPath)
	require.ErrorContains(t, err, "is srptarget serve running?")
	_, _, err = e.ctl("status")
	require.ErrorContains(t, err, "is srptarget serve running?")
}

func TestControlProtocol(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	c, err := net.Dial("unix", e.opts.ControlPath)
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	ask := func(line string) control.Response {
		t.Helper()
		_, err := c.Write([]byte(line + "\n"))
		require.NoError(t, err)
		b, err := r.ReadBytes('\n')
		require.NoError(t, err)
		var rsp control.Response
		require.NoError(t, json.Unmarshal(b, &rsp))
		require.Equal(t, control.Version, rsp.Version)
		return rsp
	}
	for _, tt := range []struct{ req, wantErr string }{
		{`{"version":2,"command":"status"}`, "protocol version 2 is not supported: this daemon speaks version 1"},
		{`{"version":1,"command":"format-disk"}`, `unknown command "format-disk"`},
		{`{"version":1,"command":"status","extra":1}`, `malformed request: json: unknown field "extra"`},
		{`not json`, "malformed request: invalid character 'o' in literal null (expecting 'u')"},
		{`{"version":1,"command":"acl-check","initiator":"x"}`, `initiator "x": want 0x and 32 hex digits, as the log prints it (0x00000000000000000002c90300a0b0c2)`},
	} {
		rsp := ask(tt.req)
		require.False(t, rsp.OK, tt.req)
		require.Equal(t, tt.wantErr, rsp.Error, tt.req)
	}
	// The connection still answers after errors: one answer per request line.
	rsp := ask(`{"version":1,"command":"stats"}`)
	require.True(t, rsp.OK)
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// TestControlAnswersWhileWaitingForDevice: serve started before the RDMA device answers
// status on its control socket (and says that it waits), refuses the commands that need a
// running target with the reason, and serves them once the device is there.
func TestControlAnswersWhileWaitingForDevice(t *testing.T) {
	e := newControlEnv(t, daemontest.NoIdentity)
	var deviceUp atomic.Bool
	e.opts.DevicePoll = 10 * time.Millisecond
	e.opts.Devices = func() ([]daemon.Device, error) {
		if !deviceUp.Load() {
			return nil, nil
		}
		return []daemon.Device{{Name: "rxe0", NodeGUID: 0x0002c90300a34270}}, nil
	}
	ready := make(chan struct{}, 1)
	e.opts.Ready = func() { ready <- struct{}{} }
	go func() { e.Served <- daemon.Serve(e.opts) }()

	var st control.StatusInfo
	require.Eventually(t, func() bool {
		_, _, err := e.ctl("status")
		return exitCode(err) == exitNotServing
	}, 10*time.Second, 5*time.Millisecond, "the control socket while waiting")
	select {
	case err := <-e.Served:
		t.Fatalf("serve returned while it should wait: %v\n%s", err, e.LogText())
	default:
	}
	out, _, err := e.ctl("status", "--json")
	require.Equal(t, exitNotServing, exitCode(err), "status exits 4 while nothing is served")
	require.NoError(t, json.Unmarshal([]byte(out), &struct {
		Result *control.StatusInfo `json:"result"`
	}{&st}))
	require.Equal(t, "waiting for an RDMA device", st.State)
	require.Equal(t, []control.ListenerInfo{{Address: "192.0.2.1:5555", State: "waiting for an RDMA device with this address"}}, st.Listeners)
	// Every command answers with what is known before the target identity.
	var ss []control.SessionInfo
	e.ctlJSON(&ss, "sessions")
	require.Empty(t, ss)
	var ls []control.LUNInfo
	e.ctlJSON(&ls, "luns")
	require.Equal(t, []int{0, 1}, []int{ls[0].LUN, ls[1].LUN})
	require.Equal(t, "memory", ls[0].Backstore)
	require.Equal(t, uint64(16<<20), ls[0].Size)
	require.Equal(t, e.Dir+"/lun1.img", ls[1].Path)
	var stats []control.StatEntry
	e.ctlJSON(&stats, "stats")
	require.NotEmpty(t, stats)
	out, errOut, err := e.ctl("acl-check", "--initiator", "0x0000000000000000000000000000aaaa")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "admitted by acls[0]")
	require.Contains(t, out, "LUNs: 0, 1")

	// reload answers while waiting (systemctl reload runs it): the file is checked, its
	// errors make it fail, and a valid one is what the daemon starts with.
	e.WriteConfig(daemontest.E2EBadConfig)
	out, errOut, err = e.ctl("reload")
	require.Equal(t, 1, exitCode(err), out)
	require.Contains(t, errOut, "luns[0].size: 1000 is not a multiple of the block size 512")
	require.Contains(t, errOut, "reload refused: 2 errors")
	require.Equal(t, 1, e.Count("reload while waiting for an RDMA device: the configuration has errors; it is read again when a device appears", "errors", 2), e.LogText())
	out, errOut, err = e.ctl("reload", "--dry-run")
	require.Equal(t, 1, exitCode(err), out)
	require.Contains(t, errOut, "the reload would be refused: 2 errors")
	e.WriteConfig(daemontest.E2EConfig)
	out, errOut, err = e.ctl("reload")
	require.NoError(t, err, errOut)
	require.Equal(t, "the configuration is valid; the daemon waits for an RDMA device and starts with it when one appears\n", out)
	// A backstore that cannot be opened is refused too (the first stage opens them).
	e.WriteConfig(strings.Replace(daemontest.NoIdentity, "    create: true\n", "", 1))
	_, errOut, err = e.ctl("reload")
	require.Equal(t, 1, exitCode(err))
	require.Contains(t, errOut, "lun1.img")
	e.WriteConfig(daemontest.NoIdentity)

	deviceUp.Store(true)
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("the daemon did not start once the device appeared\n%s", e.LogText())
	}
	e.ctlJSON(&st, "status")
	require.Equal(t, "serving", st.State)
	require.Len(t, st.Listeners, 1)
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// TestValidateDiff: validate --diff shows what a reload with another file would change in the
// running daemon, and changes nothing; a file that the daemon would refuse exits 1.
func TestValidateDiff(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	rw := e.LoginRW()

	other := filepath.Join(e.Dir, "candidate.yaml")
	require.NoError(t, os.WriteFile(other, []byte(strings.ReplaceAll(daemontest.E2EReloadConfig, "DIR", e.Dir)), 0o644))
	out, errOut, err := e.ctl("validate", "--config", other, "--diff")
	require.NoError(t, err, errOut)
	require.Contains(t, out, other+": OK\n")
	require.Contains(t, out, "against the running daemon: dry run: nothing applied; the reload would change:\n  LUNs added: 2\n")
	require.Contains(t, out, "  initiator 0x0000000000000000000000000000aaaa: loses LUNs 1, gains LUNs 2\n")
	require.Equal(t, []uint16{0, 1}, daemontest.ReportLUNs(t, rw), "validate --diff applied something")
	require.True(t, daemontest.Do(t, rw, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()}).Good(), "no unit attention")

	// Valid on its own, refused by the running daemon: the target identity cannot change.
	moved := strings.Replace(strings.ReplaceAll(daemontest.E2EConfig, "DIR", e.Dir), `id_ext: "0002c90300a34270"`, `id_ext: "1111111111111111"`, 1)
	require.NoError(t, os.WriteFile(other, []byte(moved), 0o644))
	_, errOut, err = e.ctl("validate", "--config", other, "--diff")
	require.Equal(t, 1, exitCode(err), errOut)
	require.Contains(t, errOut, "the target identity cannot change while running")
	require.Contains(t, errOut, "the running daemon would refuse it: 1 error")
	require.NoError(t, e.Stop(syscall.SIGTERM))
}
