package main

import (
	"encoding/json"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/stretchr/testify/require"
)

// The control plane for scripts: each command's --json and exit status.

// decodeAnswer decodes what --json printed: the envelope, and its result into v.
func decodeAnswer(t *testing.T, out string, v any) {
	t.Helper()
	var rsp struct {
		Version int             `json:"version"`
		OK      bool            `json:"ok"`
		Result  json.RawMessage `json:"result"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&rsp), out)
	require.Equal(t, control.Version, rsp.Version)
	require.True(t, rsp.OK)
	require.NoError(t, json.Unmarshal(rsp.Result, v), out)
}

// e2eDisruptive changes LUN 0 (memory) from 16 MiB to 32 MiB and removes the ACL of the
// read-only initiator's sources.
var e2eDisruptive = strings.Replace(strings.Replace(daemontest.E2EConfig, "    size: 16MiB\n", "    size: 32MiB\n", 1), `  - sources: ["198.51.100.0/24"]
    luns: [0, 1]
    read_only: true
`, "", 1)

// TestReloadPreviewKeyByKey: the preview says what changes in each LUN and ACL, that the
// memory LUN's data is lost, and who is disconnected; the JSON has every list as a list,
// refused or not.
func TestReloadPreviewKeyByKey(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	e.MustLogin(daemontest.RWInitiator, "", 5555)
	e.MustLogin(daemontest.ROInitiator, "198.51.100.7", 5555)
	e.WriteConfig(e2eDisruptive)

	var res control.ReloadResult
	e.ctlJSON(&res, "reload", "--dry-run")
	require.Equal(t, []control.LUNChange{{LUN: 0, Fields: []control.FieldChange{{Key: "size", From: "16MiB", To: "32MiB"}}, DataLost: true}}, res.LUNChanges)
	require.Equal(t, []string{"LUN 0: the memory LUN gets new memory (size changed): its 16MiB of data are lost, the new LUN starts empty"}, res.DataLoss)
	require.Equal(t, []control.ACLChange{{ACL: "acls[1]", Change: "removed", Fields: []control.FieldChange{
		{Key: "sources", From: "[198.51.100.0/24]", To: "[]"},
		{Key: "luns", From: "[0, 1]", To: "[]"},
		{Key: "read_only", From: "true", To: "false"},
	}}}, res.ACLChanges)
	require.Equal(t, []int{0}, res.LUNsChanged)
	require.True(t, res.Disruptive())

	out, errOut, err := e.ctl("reload", "--dry-run")
	require.NoError(t, err, errOut)
	for _, want := range []string{
		"warning: data lost: LUN 0: the memory LUN gets new memory (size changed): its 16MiB of data are lost, the new LUN starts empty\n",
		"  LUN 0:\n    size: 16MiB -> 32MiB\n",
		"  acls[1] removed: sources [198.51.100.0/24], luns [0, 1], read_only true\n",
		"  initiator " + daemontest.ROInitiator.String() + ": disconnected (no ACL admits it), loses LUNs 0, 1\n",
		"  initiator " + daemontest.RWInitiator.String() + ": LUNs 0 replaced by changed ones\n",
	} {
		require.Contains(t, out, want)
	}

	// A refused reload: every list is [] in the JSON, none null.
	e.WriteConfig(daemontest.E2EBadConfig)
	out, _, err = e.ctl("reload", "--dry-run", "--json")
	require.Equal(t, exitFailed, exitStatus(err))
	var raw map[string]json.RawMessage
	decodeAnswer(t, out, &raw)
	for _, k := range []string{"luns_added", "luns_changed", "luns_removed", "luns_unchanged", "listeners_added",
		"listeners_removed", "sessions", "port_groups_changed", "lun_changes", "acl_changes", "data_loss"} {
		require.Equal(t, "[]", string(raw[k]), k)
	}
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// fakeTerminal is input that says it is a terminal.
type fakeTerminal struct{ io.Reader }

func (fakeTerminal) IsTerminal() bool { return true }

// ctlIn runs a command against e's control socket with in as its input.
func (e *env) ctlIn(in io.Reader, args ...string) (string, string, error) {
	e.T.Helper()
	var out, errOut strings.Builder
	root := newRootCommandWith(noDeps)
	root.SetIn(in)
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(args, "--control", e.opts.ControlPath))
	err := root.Execute()
	return out.String(), errOut.String(), err
}

// TestReloadAsksOnTerminal: on a terminal a reload that disconnects an initiator or loses
// data shows the preview and asks; "n" applies nothing (exit 1), "y" applies, --yes and
// --force do not ask, and neither does a reload without a terminal (systemctl reload) or one
// that disrupts nothing.
func TestReloadAsksOnTerminal(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	e.MustLogin(daemontest.ROInitiator, "198.51.100.7", 5555)
	applied := func() int64 { return e.stats()["reloads_applied"] }

	// Nothing disruptive: no question even on a terminal.
	out, errOut, err := e.ctlIn(fakeTerminal{strings.NewReader("")}, "reload")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "reload applied:")
	require.NotContains(t, errOut, "Apply it?")
	require.EqualValues(t, 1, applied())

	e.WriteConfig(e2eDisruptive)
	out, errOut, err = e.ctlIn(fakeTerminal{strings.NewReader("n\n")}, "reload")
	require.Equal(t, exitFailed, exitStatus(err))
	require.Empty(t, out)
	require.Contains(t, errOut, "initiator "+daemontest.ROInitiator.String()+": disconnected (no ACL admits it)")
	require.Contains(t, errOut, "warning: data lost: LUN 0")
	require.Contains(t, errOut, "Apply it? [y/N] nothing applied (srptarget reload --yes applies without asking)\n")
	require.EqualValues(t, 1, applied(), "declined: nothing applied")
	var ss []control.SessionInfo
	e.ctlJSON(&ss, "sessions")
	require.Len(t, ss, 1)

	_, errOut, err = e.ctlIn(fakeTerminal{strings.NewReader("")}, "reload")
	require.Equal(t, exitFailed, exitStatus(err), "no answer is no")
	require.Contains(t, errOut, "nothing applied")
	require.EqualValues(t, 1, applied())

	out, errOut, err = e.ctlIn(fakeTerminal{strings.NewReader("yes\n")}, "reload")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "reload applied:")
	require.EqualValues(t, 2, applied())
	require.Eventually(t, func() bool {
		e.ctlJSON(&ss, "sessions")
		return len(ss) == 0
	}, 5e9, 1e7, "the read-only initiator is disconnected")

	for _, args := range [][]string{{"reload", "--yes"}, {"reload", "--force"}, {"reload", "-y"}} {
		e.WriteConfig(daemontest.E2EConfig) // LUN 0 changes back: its data is lost again
		_, errOut, err = e.ctlIn(strings.NewReader(""), "reload")
		require.NoError(t, err, errOut)
		e.WriteConfig(e2eDisruptive)
		_, errOut, err = e.ctlIn(fakeTerminal{strings.NewReader("")}, args...)
		require.NoError(t, err, "%v: %s", args, errOut)
		require.NotContains(t, errOut, "Apply it?", args)
	}
	// Without a terminal it applies as SIGHUP does.
	e.WriteConfig(daemontest.E2EConfig)
	_, errOut, err = e.ctlIn(strings.NewReader(""), "reload")
	require.NoError(t, err, errOut)
	e.WriteConfig(e2eDisruptive)
	out, errOut, err = e.ctlIn(strings.NewReader(""), "reload")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "reload applied:")
	require.NotContains(t, errOut, "Apply it?")
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// TestUsageExitStatus: mistakes in the command line exit 2, whatever the command.
func TestUsageExitStatus(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"status", "--bogus"},
		{"status", "extra"},
		{"acl-check"},
		{"acl-check", "--initiator"},
		{"version", "extra"},
		{"log-level", "verbose"},
		{"log-level", "info", "debug"},
		{"reload", "--dry-run=maybe"},
		{"validate", "--config"},
		{"serve", "--shutdown-timeout", "soon"},
		{"serve", "--cpuprofile-wait"},
	} {
		_, _, err := run(t, noDeps, args...)
		require.Error(t, err, "%v", args)
		require.Equal(t, exitUsage, exitStatus(err), "%v: %v", args, err)
	}
	out, _, err := run(t, noDeps)
	require.NoError(t, err, "no command prints the help")
	require.Contains(t, out, "Available Commands:")
	_, _, err = run(t, noDeps, "status", "--control", "/nonexistent/control.sock")
	require.Equal(t, exitUnreachable, exitStatus(err))
}

// TestValidateJSON: validate --json prints the result, errors and warnings with file, line
// and key, and exits 1 for a file with errors.
func TestValidateJSON(t *testing.T) {
	good := writeFile(t, "good.yaml", strings.ReplaceAll(daemontest.E2EConfig, "DIR", t.TempDir()))
	out, errOut, err := run(t, noDeps, "validate", "--config", good, "--json")
	require.NoError(t, err, errOut)
	var res validateResult
	decodeAnswer(t, out, &res)
	require.True(t, res.Valid)
	require.Empty(t, res.Errors)
	require.NotNil(t, res.Errors)
	require.Equal(t, &validateTarget{IDExt: "0002c90300a34270", IOCGUID: "0002c90300a34270"}, res.Target)
	require.Equal(t, []string{"192.0.2.1:5555"}, res.Listeners)
	require.Len(t, res.LUNs, 2)
	require.Equal(t, validateLUN{LUN: 0, Backstore: "memory", Size: 16 << 20, BlockSize: 512}, res.LUNs[0])
	require.Equal(t, validateACL{Index: 1, Initiators: []string{}, Sources: []string{"198.51.100.0/24"}, LUNs: []int{0, 1}, ReadOnly: true}, res.ACLs[1])

	bad := writeFile(t, "bad.yaml", "listeners:\n  - address: 192.0.2.1\n    port: fifty\nluns:\n  - lun: 0\n    backstore: memroy\n    size: 1MiB\n")
	out, _, err = run(t, noDeps, "validate", "--config", bad, "--json")
	require.Equal(t, exitFailed, exitStatus(err))
	res = validateResult{}
	decodeAnswer(t, out, &res)
	require.False(t, res.Valid)
	require.Equal(t, []configIssue{
		{File: bad, Line: 3, Key: "listeners[0].port", Message: `"fifty" is not a whole number`},
		{File: bad, Line: 6, Key: "luns[0].backstore", Message: `"memroy" is not one of file, block, memory, null, rbd`},
	}, res.Errors)

	// A warning of the whole file has no line.
	noACL := writeFile(t, "noacl.yaml", "listeners:\n  - address: 192.0.2.1\n    port: 5555\nluns:\n  - lun: 0\n    backstore: memory\n    size: 1MiB\n")
	out, _, err = run(t, noDeps, "validate", "--config", noACL, "--json")
	require.NoError(t, err)
	res = validateResult{}
	decodeAnswer(t, out, &res)
	require.Contains(t, res.Warnings, configIssue{File: noACL, Message: "no ACLs: every login will be refused"})
}

// TestVersionJSON: version --json is status --json's build object.
func TestVersionJSON(t *testing.T) {
	out, _, err := run(t, noDeps, "version", "--json")
	require.NoError(t, err)
	var b control.BuildInfo
	decodeAnswer(t, out, &b)
	require.Equal(t, build, b)
}

// TestCompletionOfValues: the shell completes LUN numbers and initiator port identifiers
// from the running daemon, log levels, and configuration files as YAML files; sessions and
// luns take those values to show only them.
func TestCompletionOfValues(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	e.MustLogin(daemontest.RWInitiator, "", 5555)
	complete := func(args ...string) []string {
		t.Helper()
		out, errOut, err := run(t, noDeps, append([]string{"__complete"}, args...)...)
		require.NoError(t, err, errOut)
		return strings.Split(strings.TrimSpace(out), "\n")
	}
	noFiles := ":4" // cobra.ShellCompDirectiveNoFileComp
	require.Equal(t, []string{"0\tmemory", "1\tfile " + e.Dir + "/lun1.img", noFiles},
		complete("luns", "--control", e.opts.ControlPath, ""))
	require.Equal(t, []string{"1\tfile " + e.Dir + "/lun1.img", noFiles},
		complete("luns", "--control", e.opts.ControlPath, "0", ""), "a LUN given is not offered again")
	var ss []control.SessionInfo
	e.ctlJSON(&ss, "sessions")
	require.Len(t, ss, 1)
	initiator := daemontest.RWInitiator.String() + "\tfrom " + ss[0].Sources[0]
	require.Equal(t, []string{initiator, noFiles}, complete("acl-check", "--control", e.opts.ControlPath, "--initiator", ""))
	require.Equal(t, []string{initiator, noFiles}, complete("sessions", "--control", e.opts.ControlPath, ""))
	require.Equal(t, []string{"debug", "info", "warn", "error", noFiles}, complete("log-level", ""))
	require.Equal(t, []string{"yaml", "yml", ":8"}, complete("validate", "--config", ""), "YAML files (ShellCompDirectiveFilterFileExt)")
	require.Equal(t, []string{noFiles}, complete("luns", "--control", "/nonexistent/control.sock", ""), "no daemon: nothing")

	var ls []control.LUNInfo
	out, errOut, err := e.ctl("luns", "1", "--json")
	require.NoError(t, err, errOut)
	decodeAnswer(t, out, &ls)
	require.Len(t, ls, 1)
	require.Equal(t, 1, ls[0].LUN)
	out, _, err = e.ctl("luns", "0")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "LUN 0: memory"), out)
	require.NotContains(t, out, "LUN 1")
	_, _, err = e.ctl("luns", "zero")
	require.Equal(t, exitUsage, exitStatus(err))
	out, _, err = e.ctl("sessions", daemontest.ROInitiator.String(), "--json")
	require.NoError(t, err)
	decodeAnswer(t, out, &ss)
	require.Empty(t, ss)
	require.Contains(t, out, `"result": []`)
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// TestDevicesAndLoginLineJSON: devices --json and login-line --json, with the node GUID as a
// string and one entry per target port and listener.
func TestDevicesAndLoginLineJSON(t *testing.T) {
	deps := loginLineDeps{devices: func() ([]daemon.Device, error) {
		return []daemon.Device{
			{Name: "rxe0", NodeGUID: 0x000000fffe000001, Ports: []daemon.Port{{
				Num: 1, State: "ACTIVE", LinkLayer: "Ethernet", ActiveMTU: 1024,
				GIDs: []daemon.GID{{Index: 1, GID: netip.MustParseAddr("::ffff:169.254.50.1"), Type: "RoCE v2", Netdev: "dummy0"}},
			}}},
			{Name: "mlx5_0", NodeGUID: 0x0002c90300a0b0c1, Ports: []daemon.Port{{Num: 1, State: "DOWN", LinkLayer: "InfiniBand"}}},
		}, nil
	}, interfaces: noDeps.interfaces}
	out, _, err := run(t, deps, "devices", "--json")
	require.NoError(t, err)
	var devs []map[string]any
	decodeAnswer(t, out, &devs)
	require.Len(t, devs, 2)
	require.Equal(t, "mlx5_0", devs[0]["name"])
	require.Equal(t, "0002:c903:00a0:b0c1", devs[0]["node_guid"])
	port := devs[1]["ports"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"port": 1.0, "state": "ACTIVE", "link_layer": "Ethernet", "active_mtu": 1024.0,
		"gids": []any{map[string]any{"index": 1.0, "gid": "::ffff:169.254.50.1", "type": "RoCE v2", "netdev": "dummy0"}}}, port)
	_, _, err = run(t, loginLineDeps{devices: func() ([]daemon.Device, error) { return nil, nil }}, "devices", "--json")
	require.Equal(t, exitFailed, exitStatus(err))

	file := writeFile(t, "l.yaml", `target:
  id_ext: "0002c90300a0b0c1"
  ports: [{id_ext: "0002c90300a0b0c2", relative_port_id: 2}]
listeners: [{address: 192.168.1.10, port: 5555}, {address: "fe80::1%eth0", port: 5555}]
`)
	out, errOut, err := run(t, deps, "login-line", "--config", file, "--json")
	require.NoError(t, err, errOut)
	var ll daemon.LoginLineResult
	decodeAnswer(t, out, &ll)
	require.Equal(t, "0002c90300a0b0c1", ll.IDExt)
	require.Equal(t, "configuration", ll.From)
	require.Len(t, ll.Logins, 4, "two listeners times two target ports")
	const sys = `" > /sys/class/infiniband_srp/srp-<dev>-<port>/add_target`
	require.Equal(t, daemon.LoginLine{IDExt: "0002c90300a0b0c1", IOCGUID: "0002c90300a0b0c1", RelativePort: 1, Listener: "192.168.1.10:5555",
		Dest: "192.168.1.10:5555", Command: `echo "id_ext=0002c90300a0b0c1,ioc_guid=0002c90300a0b0c1,dest=192.168.1.10:5555` + sys}, ll.Logins[0])
	require.Equal(t, "[fe80::1%<if>]:5555", ll.Logins[1].Dest)
	require.Contains(t, ll.Logins[1].Note, "replace <if>")
	require.Equal(t, uint16(2), ll.Logins[2].RelativePort)
	require.Equal(t, "0002c90300a0b0c2", ll.Logins[2].IDExt)
}

// TestControlCommandsJSONAndExitStatus: every command that asks the daemon prints the
// versioned envelope with --json, exits as documented, and exits 3 when no daemon answers.
func TestControlCommandsJSONAndExitStatus(t *testing.T) {
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	e.MustLogin(daemontest.RWInitiator, "", 5555)
	for _, tc := range []struct {
		args []string
		exit int
		// result is a key of the result object, or "[" for a list.
		result string
	}{
		{[]string{"status"}, exitOK, "build"},
		{[]string{"sessions"}, exitOK, "["},
		{[]string{"luns"}, exitOK, "["},
		{[]string{"stats"}, exitOK, "["},
		{[]string{"reload", "--dry-run"}, exitOK, "lun_changes"},
		{[]string{"reload"}, exitOK, "applied"},
		{[]string{"acl-check", "--initiator", daemontest.RWInitiator.String()}, exitOK, "acl"},
		{[]string{"acl-check", "--initiator", daemontest.StrangerInitiator.String()}, exitFailed, "refusal"},
		{[]string{"log-level"}, exitOK, "level"},
	} {
		out, errOut, err := e.ctl(append(tc.args, "--json")...)
		require.Equal(t, tc.exit, exitStatus(err), "%v: %s", tc.args, errOut)
		var result json.RawMessage
		decodeAnswer(t, out, &result)
		if tc.result == "[" {
			require.True(t, strings.HasPrefix(string(result), "["), "%v: %s", tc.args, result)
		} else {
			var m map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(result, &m), "%v", tc.args)
			require.Contains(t, m, tc.result, "%v", tc.args)
		}
		_, _, err = run(t, noDeps, append(tc.args, "--json", "--control", e.Dir+"/none.sock")...)
		require.Equal(t, exitUnreachable, exitStatus(err), "%v without a daemon", tc.args)
	}
	e.WriteConfig(daemontest.E2EBadConfig)
	out, _, err := e.ctl("reload", "--json")
	require.Equal(t, exitFailed, exitStatus(err), "a refused reload")
	var res control.ReloadResult
	decodeAnswer(t, out, &res)
	require.NotEmpty(t, res.Errors)
	require.False(t, res.Applied)
	require.NoError(t, e.Stop(syscall.SIGTERM))
}
