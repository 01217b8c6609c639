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

	"github.com/srptarget/srptarget/srp/srptest"
)

// newControlEnv is newEnv with the control socket in a directory that does not exist yet.
func newControlEnv(t *testing.T, config string) *env {
	t.Helper()
	e := newEnv(t, config)
	e.opts.controlPath = filepath.Join(e.dir, "run", "control.sock")
	return e
}

// ctl runs an srptarget command against e's control socket.
func (e *env) ctl(args ...string) (string, string, error) {
	e.t.Helper()
	return run(e.t, noDeps, append(args, "--control", e.opts.controlPath)...)
}

// ctlJSON runs a command with --json and decodes the answer's result into v.
func (e *env) ctlJSON(v any, args ...string) {
	e.t.Helper()
	out, errOut, err := e.ctl(append(args, "--json")...)
	require.NoError(e.t, err, errOut)
	var rsp struct {
		Version int             `json:"version"`
		OK      bool            `json:"ok"`
		Result  json.RawMessage `json:"result"`
	}
	require.NoError(e.t, json.Unmarshal([]byte(out), &rsp), out)
	require.Equal(e.t, controlVersion, rsp.Version)
	require.True(e.t, rsp.OK)
	require.NoError(e.t, json.Unmarshal(rsp.Result, v), out)
}

// stats returns the counters of srptarget stats --json by name.
func (e *env) stats() map[string]int64 {
	e.t.Helper()
	var stats []statEntry
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
		return ec.code
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
	e := newControlEnv(t, e2eConfig)
	e.start()
	fi, err := os.Lstat(e.opts.controlPath)
	require.NoError(t, err)
	require.Equal(t, os.ModeSocket, fi.Mode().Type())
	require.Equal(t, os.FileMode(0o660), fi.Mode().Perm())
	di, err := os.Stat(filepath.Dir(e.opts.controlPath))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o750), di.Mode().Perm())
	require.NoError(t, e.stop(syscall.SIGTERM))
	_, err = os.Lstat(e.opts.controlPath)
	require.ErrorIs(t, err, os.ErrNotExist, "the socket is removed at shutdown")
}

func TestControlSocketGroup(t *testing.T) {
	gid := os.Getgid()
	e := newControlEnv(t, e2eConfig)
	e.opts.controlGroup = strconv.Itoa(gid)
	e.start()
	for _, p := range []string{e.opts.controlPath, filepath.Dir(e.opts.controlPath)} {
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		require.Equal(t, uint32(gid), fi.Sys().(*syscall.Stat_t).Gid, p)
	}
	require.NoError(t, e.stop(syscall.SIGTERM))

	e = newControlEnv(t, e2eConfig)
	e.opts.controlGroup = "no-such-group-srptarget"
	require.Equal(t, exitCodeError{1}, runServe(e.opts))
	require.Contains(t, e.logText(), `control socket: group "no-such-group-srptarget": group: unknown group no-such-group-srptarget`)
}

func TestControlSocketStaleReplacedLiveRefused(t *testing.T) {
	// A socket file nobody answers on (a daemon killed with SIGKILL) is replaced.
	e := newControlEnv(t, e2eConfig)
	require.NoError(t, os.MkdirAll(filepath.Dir(e.opts.controlPath), 0o750))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: e.opts.controlPath, Net: "unix"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	e.start()
	_, _, err = e.ctl("status")
	require.NoError(t, err)
	require.Equal(t, 1, e.count("replaced a stale control socket"))

	// A second daemon on the same socket does not start.
	e2 := newEnv(t, strings.ReplaceAll(e2eConfig, "5555", "5557"))
	e2.opts.controlPath = e.opts.controlPath
	e2.opts.ready = func(*daemon) { t.Error("the second daemon started") }
	require.Equal(t, exitCodeError{1}, runServe(e2.opts))
	require.Contains(t, e2.logText(), "another process (a second srptarget?) answers on it")
	require.NoError(t, e.stop(syscall.SIGTERM))

	// Something that is not a socket is left alone.
	require.NoError(t, os.WriteFile(e.opts.controlPath, []byte("x"), 0o600))
	e3 := newEnv(t, e2eConfig)
	e3.opts.controlPath = e.opts.controlPath
	require.Equal(t, exitCodeError{1}, runServe(e3.opts))
	require.Contains(t, e3.logText(), "exists and is not a socket")
}

// times and QP numbers change from run to run.
var unstable = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|QP \d+|pid \d+|up \S+|channel \d+|:4\d{4}`)

func TestControlStatusSessionsLUNsStats(t *testing.T) {
	e := newControlEnv(t, e2eConfig)
	e.start()
	before := time.Now().UTC().Add(-time.Second)
	rw := e.mustLogin(rwInitiator, "", 5555)
	clearUA(t, rw, 0)
	ro := e.mustLogin(roInitiator, "198.51.100.7", 5555)
	clearUA(t, ro, 0)

	e.waitQuiet()
	var st statusInfo
	e.ctlJSON(&st, "status")
	require.Equal(t, version, st.Version)
	require.Equal(t, build, st.Build)
	require.Equal(t, os.Getpid(), st.PID)
	require.Equal(t, e.file, st.Config)
	require.Equal(t, "0002c90300a34270", st.IDExt)
	require.Equal(t, "0002c90300a34270", st.IOCGUID)
	require.Equal(t, []listenerInfo{{Address: "192.0.2.1:5555", State: "listening"}}, st.Listeners)
	require.Equal(t, "no devices in tests", st.DevicesError)
	require.Equal(t, int64(16<<20), st.BufferPoolSize)
	require.Zero(t, st.BufferPoolInUse)
	require.Equal(t, 2, st.Sessions)
	require.Equal(t, 2, st.Channels)
	require.Zero(t, st.CommandsInFlight)
	out, _, err := e.ctl("status")
	require.NoError(t, err)
	require.Equal(t, `srptarget `+version+`, pid 1, up 1 (since 2026-01-01T00:00:00Z)
config: `+e.file+`
target: id_ext=0002c90300a34270 ioc_guid=0002c90300a34270 (from the configuration)
listeners:
  192.0.2.1:5555: listening
RDMA devices: unknown (no devices in tests)
buffer pool: 0 bytes in use of 16 MiB
sessions: 2, channels: 2, commands in flight: 0
`, normalize(out))

	var ss []sessionInfo
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
		ss[i].IO, ss[i].LUNIO = ioCounts{}, nil // TestPerInitiatorStats checks them
	}
	rwSrc := rw.Conn().LocalAddr()
	require.Equal(t, []sessionInfo{
		{
			Initiator: rwInitiator.String(),
			Sources:   []string{rwSrc.Addr().String()},
			ACL:       &aclRef{Index: 0, Name: "acls[0]", Description: "initiators 0x0000000000000000000000000000aaaa"},
			LUNs:      []lunRef{{LUN: 0}, {LUN: 1}},
			Channels:  []channelInfo{{Source: rwSrc.String(), Credits: 128}},
		},
		{
			Initiator: roInitiator.String(),
			Sources:   []string{"198.51.100.7"},
			ACL:       &aclRef{Index: 1, Name: "acls[1]", Description: "sources 198.51.100.0/24, read-only"},
			LUNs:      []lunRef{{LUN: 0, ReadOnly: true}, {LUN: 1, ReadOnly: true}},
			Channels:  []channelInfo{{Source: ro.Conn().LocalAddr().String(), Credits: 128}},
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

	var ls []lunInfo
	e.ctlJSON(&ls, "luns")
	both := []string{rwInitiator.String(), roInitiator.String()}
	require.ElementsMatch(t, both, ls[0].Sessions)
	require.ElementsMatch(t, both, ls[1].Sessions)
	ls[0].Sessions, ls[1].Sessions = nil, nil
	require.Len(t, ls[0].Initiators, 2, "both did clearUA on LUN 0")
	require.Empty(t, ls[1].Initiators)
	require.Equal(t, uint64(4), ls[0].IO.Commands)
	ls[0].IO, ls[0].Initiators, ls[1].Initiators = ioCounts{}, nil, nil // TestPerInitiatorStats checks them
	require.Equal(t, []lunInfo{
		{LUN: 0, Backstore: "memory", Size: 16 << 20, BlockSize: 512, WriteCache: true, ThinProvisioning: true, Serial: "0002c90300a342700000"},
		{LUN: 1, Backstore: "file", Path: filepath.Join(e.dir, "lun1.img"), Size: 8 << 20, BlockSize: 512, WriteCache: true, ThinProvisioning: true, Serial: "0002c90300a342700001"},
	}, ls)
	out, _, err = e.ctl("luns")
	require.NoError(t, err)
	require.Contains(t, out, "LUN 0: memory, 16 MiB, 512-byte blocks, serial 0002c90300a342700000, write cache, thin\n  used by 0x")
	require.Contains(t, out, "LUN 1: file "+filepath.Join(e.dir, "lun1.img")+", 8 MiB, 512-byte blocks, serial 0002c90300a342700001, write cache, thin\n")

	got := e.stats()
	require.Equal(t, int64(2), got["logins_accepted"])
	require.Equal(t, int64(2), got["channels_open"])
	require.Positive(t, got["commands"])
	require.Contains(t, got, "logins_rejected_channel_limit_reached")
	out, _, err = e.ctl("stats")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^logins_accepted +2$`, out)
	require.NoError(t, e.stop(syscall.SIGTERM))
}

// waitQuiet waits until every channel has published that its commands are done and its
// credits are back (the channel goroutine does once per pass of its loop, after the initiator
// may have seen the response).
func (e *env) waitQuiet() {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		for _, s := range e.d.target.Sessions() {
			for _, c := range s.ChannelInfo {
				if c.InFlight != 0 || c.CreditsHeld != int64(c.Credits) {
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
	e := newControlEnv(t, e2eConfig)
	e.start()
	rw := e.mustLogin(rwInitiator, "", 5555)
	clearUA(t, rw, 0)
	require.Equal(t, []uint16{0, 1}, reportLUNs(t, rw))

	// The dry run shows LUN 2 added and LUN 1 retired, and applies nothing: no file made, no
	// listener opened, no unit attention, the same LUNs. (LUN 3's directory must exist: only
	// under the daemon's state directory does serve make missing ones.)
	require.NoError(t, os.Mkdir(filepath.Join(e.dir, "new"), 0o700))
	e.writeConfig(strings.Replace(e2eReloadConfig, "acls:", `  - lun: 3
    backstore: file
    path: DIR/new/lun3.img
    create: true
    size: 1MiB
acls:`, 1))
	var res reloadResult
	e.ctlJSON(&res, "reload", "--dry-run")
	require.Equal(t, reloadResult{
		DryRun:            true,
		LUNsAdded:         []int{2, 3},
		LUNsChanged:       []int{},
		LUNsRemoved:       []int{1},
		LUNsUnchanged:     []int{0},
		ListenersAdded:    []string{"192.0.2.1:5556"},
		ListenersRemoved:  []string{},
		Sessions:          []sessionChange{{Initiator: rwInitiator.String(), LosesLUNs: []int{1}, GainsLUNs: []int{2}}},
		PortGroupsChanged: []string{},
		LUNChanges:        []lunChange{},
		ACLChanges: []aclChange{
			{ACL: "acls[0]", Change: "changed", Fields: []fieldChange{{Key: "luns", From: "[0, 1]", To: "[0, 2]"}}},
			{ACL: "acls[1]", Change: "changed", Fields: []fieldChange{{Key: "luns", From: "[0, 1]", To: "[0, 2]"}}},
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
	_, err = os.Stat(filepath.Join(e.dir, "new", "lun3.img"))
	require.ErrorIs(t, err, os.ErrNotExist, "a dry run makes no file")
	require.True(t, do(t, rw, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()}).Good(), "no unit attention")
	require.Equal(t, []uint16{0, 1}, reportLUNs(t, rw))
	var ls []lunInfo
	e.ctlJSON(&ls, "luns")
	require.Len(t, ls, 2)
	require.Equal(t, 1, ls[1].LUN)
	var st statusInfo
	e.ctlJSON(&st, "status")
	require.Len(t, st.Listeners, 1)
	require.Zero(t, e.count("configuration reloaded"))

	// The reload applies it: the initiator sees LUN 2.
	e.writeConfig(e2eReloadConfig)
	out, errOut, err := e.ctl("reload")
	require.NoError(t, err, errOut)
	require.Equal(t, "reload applied:\n"+changes("2"), out)
	rsp := do(t, rw, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()})
	requireSense(t, rsp, senseUnitAttention, 0x3F, 0x0E)
	require.Equal(t, []uint16{0, 2}, reportLUNs(t, rw))
	require.Equal(t, 1, e.count("configuration reloaded", "luns_added", "[2]", "luns_removed", "[1]"))

	// A refused reload exits 1 with every error, as the log has them; so does its dry run.
	e.writeConfig(e2eBadConfig)
	want := e.file + ":7: luns[0].size: 1000 is not a multiple of the block size 512\n" +
		e.file + ":10: acls[0].luns[1]: LUN 9 is not defined under luns\n"
	out, errOut, err = e.ctl("reload")
	require.Equal(t, 1, exitCode(err))
	require.Empty(t, out)
	require.Equal(t, want+"reload refused: 2 errors; the running configuration is unchanged\n", errOut)
	out, errOut, err = e.ctl("reload", "--dry-run")
	require.Equal(t, 1, exitCode(err))
	require.Empty(t, out)
	require.Equal(t, want+"the reload would be refused: 2 errors; the running configuration is unchanged\n", errOut)
	require.Equal(t, 1, e.logs.FilterMessage("reload failed: the running configuration is unchanged").Len(), "the dry run logs no failure")
	require.Equal(t, []uint16{0, 2}, reportLUNs(t, rw))

	// SIGHUP still reloads.
	e.writeConfig(e2eConfig)
	require.NoError(t, e.reload())
	require.Equal(t, 2, e.logs.FilterMessage("configuration reloaded").Len())
	// Counted for srptarget stats: two applied (socket, SIGHUP), one refused, dry runs not.
	counts := e.stats()
	require.Equal(t, int64(2), counts["reloads_applied"])
	require.Equal(t, int64(1), counts["reloads_failed"])
	require.NoError(t, e.stop(syscall.SIGTERM))
}

// normalizeNil makes the empty lists of a decoded reload result comparable.
func normalizeNil(r reloadResult) reloadResult {
	if r.Sessions == nil {
		r.Sessions = []sessionChange{}
	}
	return r
}

func TestControlReloadDisconnects(t *testing.T) {
	e := newControlEnv(t, e2eConfig)
	e.start()
	e.mustLogin(roInitiator, "198.51.100.7", 5555)
	// Without the sources ACL the read-only initiator is refused.
	e.writeConfig(strings.Replace(e2eConfig, `  - sources: ["198.51.100.0/24"]
    luns: [0, 1]
    read_only: true
`, "", 1))
	var res reloadResult
	e.ctlJSON(&res, "reload", "--dry-run")
	require.Equal(t, []sessionChange{{Initiator: roInitiator.String(), LosesLUNs: []int{0, 1}, Disconnected: true, ChannelsDisconnected: 1}}, res.Sessions)
	out, _, err := e.ctl("reload", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "  initiator 0x0000000000000000000000000000bbbb: disconnected (no ACL admits it), loses LUNs 0, 1\n")
	require.NoError(t, e.stop(syscall.SIGTERM))
}

func TestControlACLCheck(t *testing.T) {
	e := newControlEnv(t, e2eConfig)
	e.start()
	var res aclCheckResult
	e.ctlJSON(&res, "acl-check", "--initiator", rwInitiator.String())
	require.Equal(t, aclCheckResult{
		From: "daemon", Initiator: rwInitiator.String(),
		ACL:  &aclRef{Index: 0, Name: "acls[0]", Description: "initiators 0x0000000000000000000000000000aaaa"},
		LUNs: []lunRef{{LUN: 0}, {LUN: 1}},
	}, res)
	out, _, err := e.ctl("acl-check", "--initiator", strangerInitiator.String(), "--source", "198.51.100.9")
	require.NoError(t, err)
	require.Equal(t, `answered by the daemon on `+e.opts.controlPath+` (the running configuration)
initiator 0x0000000000000000000000000000cccc from 198.51.100.9: admitted by acls[1] (sources 198.51.100.0/24, read-only)
LUNs: 0 (read-only), 1 (read-only)
`, out)
	out, _, err = e.ctl("acl-check", "--initiator", strangerInitiator.String(), "--source", "203.0.113.9")
	require.Equal(t, 1, exitCode(err))
	require.Contains(t, out, "initiator 0x0000000000000000000000000000cccc from 203.0.113.9: no ACL admits it, its logins are refused\n"+
		`initiator 0x0000000000000000000000000000cccc from 203.0.113.9 matches none of the 2 ACLs; to let it in`)
	_, _, err = e.ctl("acl-check", "--initiator", "0x1234")
	require.ErrorContains(t, err, `initiator "0x1234": want 0x and 32 hex digits`)
	require.NoError(t, e.stop(syscall.SIGTERM))

	// No daemon: from --config, said so; without --config, an error that says what to check.
	out, errOut, err := e.ctl("acl-check", "--initiator", strangerInitiator.String(), "--source", "198.51.100.9", "--config", e.file)
	require.NoError(t, err)
	require.Equal(t, "no daemon answers on "+e.opts.controlPath+": answering from "+e.file+"\n", errOut)
	require.Equal(t, `answered from `+e.file+` (no daemon)
initiator 0x0000000000000000000000000000cccc from 198.51.100.9: admitted by acls[1] (sources 198.51.100.0/24, read-only)
LUNs: 0 (read-only), 1 (read-only)
`, out)
	_, _, err = e.ctl("acl-check", "--initiator", rwInitiator.String())
	require.ErrorContains(t, err, "cannot reach the daemon on "+e.opts.controlPath)
	require.ErrorContains(t, err, "is srptarget serve running?")
	_, _, err = e.ctl("status")
	require.ErrorContains(t, err, "is srptarget serve running?")
}

func TestControlProtocol(t *testing.T) {
	e := newControlEnv(t, e2eConfig)
	e.start()
	c, err := net.Dial("unix", e.opts.controlPath)
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	ask := func(line string) controlResponse {
		t.Helper()
		_, err := c.Write([]byte(line + "\n"))
		require.NoError(t, err)
		b, err := r.ReadBytes('\n')
		require.NoError(t, err)
		var rsp controlResponse
		require.NoError(t, json.Unmarshal(b, &rsp))
		require.Equal(t, controlVersion, rsp.Version)
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
	require.NoError(t, e.stop(syscall.SIGTERM))
}

// TestControlAnswersWhileWaitingForDevice: serve started before the RDMA device answers
// status on its control socket (and says that it waits), refuses the commands that need a
// running target with the reason, and serves them once the device is there.
func TestControlAnswersWhileWaitingForDevice(t *testing.T) {
	e := newControlEnv(t, noIdentity)
	var deviceUp atomic.Bool
	e.opts.devicePoll = 10 * time.Millisecond
	e.opts.devices = func() ([]rdmaDevice, error) {
		if !deviceUp.Load() {
			return nil, nil
		}
		return []rdmaDevice{{Name: "rxe0", NodeGUID: 0x0002c90300a34270}}, nil
	}
	ready := make(chan *daemon, 1)
	e.opts.ready = func(d *daemon) { ready <- d }
	go func() { e.served <- runServe(e.opts) }()

	var st statusInfo
	require.Eventually(t, func() bool {
		_, _, err := e.ctl("status")
		return exitCode(err) == exitNotServing
	}, 10*time.Second, 5*time.Millisecond, "the control socket while waiting")
	select {
	case err := <-e.served:
		t.Fatalf("serve returned while it should wait: %v\n%s", err, e.logText())
	default:
	}
	out, _, err := e.ctl("status", "--json")
	require.Equal(t, exitNotServing, exitCode(err), "status exits 4 while nothing is served")
	require.NoError(t, json.Unmarshal([]byte(out), &struct {
		Result *statusInfo `json:"result"`
	}{&st}))
	require.Equal(t, "waiting for an RDMA device", st.State)
	require.Equal(t, []listenerInfo{{"192.0.2.1:5555", listenerWaiting}}, st.Listeners)
	// Every command answers with what is known before the target identity.
	var ss []sessionInfo
	e.ctlJSON(&ss, "sessions")
	require.Empty(t, ss)
	var ls []lunInfo
	e.ctlJSON(&ls, "luns")
	require.Equal(t, []int{0, 1}, []int{ls[0].LUN, ls[1].LUN})
	require.Equal(t, "memory", ls[0].Backstore)
	require.Equal(t, uint64(16<<20), ls[0].Size)
	require.Equal(t, e.dir+"/lun1.img", ls[1].Path)
	var stats []statEntry
	e.ctlJSON(&stats, "stats")
	require.NotEmpty(t, stats)
	out, errOut, err := e.ctl("acl-check", "--initiator", "0x0000000000000000000000000000aaaa")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "admitted by acls[0]")
	require.Contains(t, out, "LUNs: 0, 1")

	// reload answers while waiting (systemctl reload runs it): the file is checked, its
	// errors make it fail, and a valid one is what the daemon starts with.
	e.writeConfig(e2eBadConfig)
	out, errOut, err = e.ctl("reload")
	require.Equal(t, 1, exitCode(err), out)
	require.Contains(t, errOut, "luns[0].size: 1000 is not a multiple of the block size 512")
	require.Contains(t, errOut, "reload refused: 2 errors")
	require.Equal(t, 1, e.count("reload while waiting for an RDMA device: the configuration has errors; it is read again when a device appears", "errors", 2), e.logText())
	out, errOut, err = e.ctl("reload", "--dry-run")
	require.Equal(t, 1, exitCode(err), out)
	require.Contains(t, errOut, "the reload would be refused: 2 errors")
	e.writeConfig(e2eConfig)
	out, errOut, err = e.ctl("reload")
	require.NoError(t, err, errOut)
	require.Equal(t, "the configuration is valid; the daemon waits for an RDMA device and starts with it when one appears\n", out)
	// A backstore that cannot be opened is refused too (the first stage opens them).
	e.writeConfig(strings.Replace(noIdentity, "    create: true\n", "", 1))
	_, errOut, err = e.ctl("reload")
	require.Equal(t, 1, exitCode(err))
	require.Contains(t, errOut, "lun1.img")
	e.writeConfig(noIdentity)

	deviceUp.Store(true)
	select {
	case e.d = <-ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("the daemon did not start once the device appeared\n%s", e.logText())
	}
	e.ctlJSON(&st, "status")
	require.Equal(t, "serving", st.State)
	require.Len(t, st.Listeners, 1)
	require.NoError(t, e.stop(syscall.SIGTERM))
}

// TestValidateDiff: validate --diff shows what a reload with another file would change in the
// running daemon, and changes nothing; a file that the daemon would refuse exits 1.
func TestValidateDiff(t *testing.T) {
	e := newControlEnv(t, e2eConfig)
	e.start()
	rw := e.mustLogin(rwInitiator, "", 5555)
	clearUA(t, rw, 0)

	other := filepath.Join(e.dir, "candidate.yaml")
	require.NoError(t, os.WriteFile(other, []byte(strings.ReplaceAll(e2eReloadConfig, "DIR", e.dir)), 0o644))
	out, errOut, err := e.ctl("validate", "--config", other, "--diff")
	require.NoError(t, err, errOut)
	require.Contains(t, out, other+": OK\n")
	require.Contains(t, out, "against the running daemon: dry run: nothing applied; the reload would change:\n  LUNs added: 2\n")
	require.Contains(t, out, "  initiator 0x0000000000000000000000000000aaaa: loses LUNs 1, gains LUNs 2\n")
	require.Equal(t, []uint16{0, 1}, reportLUNs(t, rw), "validate --diff applied something")
	require.True(t, do(t, rw, &srptest.Request{LUN: 0, CDB: srptest.CDBTestUnitReady()}).Good(), "no unit attention")

	// Valid on its own, refused by the running daemon: the target identity cannot change.
	moved := strings.Replace(strings.ReplaceAll(e2eConfig, "DIR", e.dir), `id_ext: "0002c90300a34270"`, `id_ext: "1111111111111111"`, 1)
	require.NoError(t, os.WriteFile(other, []byte(moved), 0o644))
	_, errOut, err = e.ctl("validate", "--config", other, "--diff")
	require.Equal(t, 1, exitCode(err), errOut)
	require.Contains(t, errOut, "the target identity cannot change while running")
	require.Contains(t, errOut, "the running daemon would refuse it: 1 error")
	require.NoError(t, e.stop(syscall.SIGTERM))
}
