package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/daemon"
	"github.com/srptarget/srptarget/srp/iu"
)

// run executes the command line args with the given seams and returns stdout, stderr and the
// error.
func run(t *testing.T, deps loginLineDeps, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCommandWith(deps)
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

var noDeps = loginLineDeps{
	devices:    func() ([]daemon.Device, error) { return nil, daemon.ErrNoRDMA },
	interfaces: func() ([]daemon.HostAddr, error) { return nil, nil },
}

func TestValidateWarnsAboutUnreachableLUNs(t *testing.T) {
	file := writeFile(t, "w.yaml", "listeners: [{address: \"::\", port: 5555}]\nluns:\n  - {lun: 0, backstore: null, size: 1MiB}\n  - {lun: 5, backstore: memory, size: 1MiB, read_only: true}\nacls:\n  - {initiators: [\"*\"], luns: [0]}\n")
	out, _, err := run(t, noDeps, "validate", "--config", file)
	require.NoError(t, err)
	// The summary's own lines are config's to test (TestSummary): validate prints it as it is.
	cfg, err := config.Check(file)
	require.NoError(t, err)
	require.Equal(t, cfg.Summary(), out)
	require.True(t, strings.HasSuffix(out, "ACLs (1):\n  acls[0]: initiators * -> LUNs 0\nwarning: LUN 5 is in no ACL: no initiator sees it\n"), out)

	file = writeFile(t, "n.yaml", "listeners: [{address: 0.0.0.0, port: 5555}]\nluns: [{lun: 0, backstore: null, size: 1MiB}]\n")
	out, _, err = run(t, noDeps, "validate", "--config", file)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(out, "ACLs (0):\nwarning: no ACLs: every login will be refused\n"), out)
}

func TestValidatePrintsEveryErrorWithItsLine(t *testing.T) {
	file := writeFile(t, "bad.yaml", `listeners:
  - address: 0.0.0.0
    port: 5555
luns:
  - lun: 0
    backstore: memory
    size: 1000
  - lun: 1
    backstore: block
    path: /dev/null
    block_size: 4096
acls:
  - initiators: ["*"]
    luns: [0, 9]
`)
	out, errOut, err := run(t, noDeps, "validate", "--config", file)
	require.Equal(t, exitCodeError{Code: 1}, err)
	require.Empty(t, out)
	require.Equal(t, file+`:7: luns[0].size: 1000 is not a multiple of the block size 512
`+file+`:10: luns[1].path: /dev/null is not a block device
`+file+`:11: luns[1].block_size: a block device has its own block size; remove block_size
`+file+`:14: acls[0].luns[1]: LUN 9 is not defined under luns
`+file+`: 4 errors
`, errOut)

	file = writeFile(t, "syntax.yaml", "listeners: [\n")
	_, errOut, err = run(t, noDeps, "validate", "--config", file)
	require.Equal(t, exitCodeError{Code: 1}, err)
	require.Equal(t, file+":1: did not find expected node content\n"+file+": 1 error\n", errOut)

	_, errOut, err = run(t, noDeps, "validate", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	require.Equal(t, exitCodeError{Code: 1}, err)
	require.Contains(t, errOut, "missing.yaml: no such file or directory")

}

const loginLineConfig = `target:
  id_ext: "0002c90300a0b0c1"
listeners:
  - {address: 192.168.1.10, port: 5555}
  - {address: "2001:db8::10", port: 5555}
  - {address: "fe80::1%eth0", port: 5556}
  - {address: 0.0.0.0, port: 6000}
  - {address: "::", port: 6001}
`

func TestLoginLinePrintsAddTargetLines(t *testing.T) {
	file := writeFile(t, "l.yaml", loginLineConfig)
	deps := loginLineDeps{
		devices: func() ([]daemon.Device, error) { t.Fatal("the identity is configured"); return nil, nil },
		interfaces: func() ([]daemon.HostAddr, error) {
			return []daemon.HostAddr{
				{Iface: "eth0", Addr: netip.MustParseAddr("192.168.1.10")},
				{Iface: "eth0", Addr: netip.MustParseAddr("fe80::1")},
				{Iface: "ib0", Addr: netip.MustParseAddr("10.0.0.1")},
				{Iface: "ib0", Addr: netip.MustParseAddr("fd00::1")},
			}, nil
		},
	}
	out, _, err := run(t, deps, "login-line", "--config", file)
	require.NoError(t, err)
	const cmd = `echo "id_ext=0002c90300a0b0c1,ioc_guid=0002c90300a0b0c1,dest=`
	const sys = `" > /sys/class/infiniband_srp/srp-<dev>-<port>/add_target`
	require.Equal(t, `# Target id_ext=0002c90300a0b0c1 ioc_guid=0002c90300a0b0c1 (from the configuration).
# Run on the initiator as root after `+"`modprobe ib_srp`"+`; <dev>-<port> is the initiator's
# RDMA device and port that reach the target (ls /sys/class/infiniband_srp/).
`+cmd+`192.168.1.10:5555`+sys+`
`+cmd+`[2001:db8::10]:5555`+sys+`
# [fe80::1%eth0]:5556 is link-local: replace <if> with the initiator's interface on that link
`+cmd+`[fe80::1%<if>]:5556`+sys+`
# 0.0.0.0:6000 listens on every address; this is 192.168.1.10 on eth0
`+cmd+`192.168.1.10:6000`+sys+`
# 0.0.0.0:6000 listens on every address; this is 10.0.0.1 on ib0
`+cmd+`10.0.0.1:6000`+sys+`
# [::]:6001 listens on every address; this is 192.168.1.10 on eth0
`+cmd+`192.168.1.10:6001`+sys+`
# [::]:6001 listens on every address; this is 10.0.0.1 on ib0
`+cmd+`10.0.0.1:6001`+sys+`
# [::]:6001 listens on every address; this is fd00::1 on ib0
`+cmd+`[fd00::1]:6001`+sys+`
`, out)
}

func TestLoginLineIdentityFromDevice(t *testing.T) {
	file := writeFile(t, "l.yaml", "listeners: [{address: 0.0.0.0, port: 5555}]\n")
	deps := loginLineDeps{
		devices: func() ([]daemon.Device, error) {
			return []daemon.Device{{Name: "rxe1", NodeGUID: 0x22}, {Name: "mlx5_0"}, {Name: "rxe0", NodeGUID: 0x000000fffe000001}}, nil
		},
		interfaces: func() ([]daemon.HostAddr, error) { return nil, errors.New("netlink refused") },
	}
	out, _, err := run(t, deps, "login-line", "--config", file)
	require.NoError(t, err)
	require.Equal(t, `# Target id_ext=000000fffe000001 ioc_guid=000000fffe000001 (from the node GUID of rxe0).
# Run on the initiator as root after `+"`modprobe ib_srp`"+`; <dev>-<port> is the initiator's
# RDMA device and port that reach the target (ls /sys/class/infiniband_srp/).
# 0.0.0.0:5555 listens on every address and the host's addresses could not be listed (netlink refused): replace <address> with the target's address on the RDMA network
echo "id_ext=000000fffe000001,ioc_guid=000000fffe000001,dest=<address>:5555" > /sys/class/infiniband_srp/srp-<dev>-<port>/add_target
`, out)

	_, _, err = run(t, noDeps, "login-line", "--config", file)
	require.EqualError(t, err, "target identity: reading the node GUID of the first RDMA device: "+daemon.ErrNoRDMA.Error()+"; or set target.id_ext and target.ioc_guid in the configuration")
}

func TestDevicesCommand(t *testing.T) {
	deps := loginLineDeps{devices: func() ([]daemon.Device, error) {
		return []daemon.Device{
			{Name: "rxe0", NodeGUID: 0x000000fffe000001, Ports: []daemon.Port{{
				Num: 1, State: "ACTIVE", LinkLayer: "Ethernet", ActiveMTU: 1024,
				GIDs: []daemon.GID{
					{Index: 0, GID: netip.MustParseAddr("fe80::200:ff:fe00:1"), Type: "RoCE v2", Netdev: "dummy0"},
					{Index: 1, GID: netip.MustParseAddr("::ffff:169.254.50.1"), Type: "RoCE v2", Netdev: "dummy0"},
				},
			}}},
			{Name: "mlx5_0", NodeGUID: 0x0002c90300a0b0c1, Ports: []daemon.Port{{Num: 1, State: "DOWN", LinkLayer: "InfiniBand"}}},
		}, nil
	}}
	out, _, err := run(t, deps, "devices")
	require.NoError(t, err)
	require.Equal(t, `mlx5_0: node GUID 0002:c903:00a0:b0c1 (the default target identity: id_ext=ioc_guid=0002c90300a0b0c1)
  port 1: DOWN, InfiniBand, LID 0, P_Key 0000, IsDeviceManagementSupported no
rxe0: node GUID 0000:00ff:fe00:0001
  port 1: ACTIVE, Ethernet, MTU 1024
    gid 0: fe80::200:ff:fe00:1 (RoCE v2, dummy0)
    gid 1: 169.254.50.1 (RoCE v2, dummy0)
`, out)

	_, _, err = run(t, loginLineDeps{devices: func() ([]daemon.Device, error) { return nil, nil }}, "devices")
	require.Equal(t, errNoDevices, err)
	_, _, err = run(t, noDeps, "devices")
	require.Equal(t, daemon.ErrNoRDMA, err)
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "json", "info")
	require.NoError(t, err)
	log.Debug("hidden")
	log.Info("login rejected", zap.Stringer("reason", iu.LoginRejChannelLimitReached))
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
	require.Equal(t, "login rejected", m["msg"])
	require.Equal(t, "info", m["level"])
	require.Equal(t, iu.LoginRejChannelLimitReached.String(), m["reason"])
	require.Contains(t, m, "ts")

	buf.Reset()
	log, err = newLogger(&buf, "console", "debug")
	require.NoError(t, err)
	log.Debug("shown", zap.Stringer("reason", iu.LoginRejChannelLimitReached))
	line := buf.String()
	require.Contains(t, line, "\tDEBUG\tshown\t{\"reason\": \""+iu.LoginRejChannelLimitReached.String()+"\"}\n")

	_, err = newLogger(&buf, "xml", "info")
	require.EqualError(t, err, `--log-format "xml": want auto, console, json or journal`)
	_, err = newLogger(&buf, "json", "loud")
	require.EqualError(t, err, `--log-level "loud": want debug, info, warn or error`)
	_, err = newLogger(&buf, "json", "fatal")
	require.EqualError(t, err, `--log-level "fatal": want debug, info, warn or error`)
}

func TestServeFlags(t *testing.T) {
	_, _, err := run(t, noDeps, "serve", "--config", "x.yaml", "--log-format", "text")
	require.EqualError(t, err, `--log-format "text": want auto, console, json or journal`)
	_, _, err = run(t, noDeps, "serve", "--config", "x.yaml", "--log-level", "verbose")
	require.EqualError(t, err, `--log-level "verbose": want debug, info, warn or error`)
}

// Without --config, serve, validate and login-line read /etc/srptarget/srptarget.yaml, where
// make install and the systemd unit put it.
func TestDefaultConfigFile(t *testing.T) {
	var got serveFlags
	serve := newServeCommandWith(func(f serveFlags) error { got = f; return nil })
	serve.SetArgs(nil)
	require.NoError(t, serve.Execute())
	require.Equal(t, "/etc/srptarget/srptarget.yaml", got.ConfigFile)

	root := newRootCommandWith(noDeps)
	for _, name := range []string{"serve", "validate", "login-line"} {
		t.Run(name, func(t *testing.T) {
			cmd, _, err := root.Find([]string{name})
			require.NoError(t, err)
			f := cmd.Flags().Lookup("config")
			require.NotNil(t, f)
			require.Equal(t, DefaultConfigFile, f.DefValue)
			require.Contains(t, cmd.Flags().FlagUsages(), "(default \"/etc/srptarget/srptarget.yaml\")")
		})
	}
}

// TestLoginLineMorePorts: every target port gets its add_target lines, the second with its own
// id_ext and the target's ioc_guid.
func TestLoginLineMorePorts(t *testing.T) {
	file := writeFile(t, "l.yaml", `target:
  id_ext: "0002c90300a0b0c1"
  ports: [{id_ext: "0002c90300a0b0c2", relative_port_id: 2}]
listeners: [{address: 192.168.1.10, port: 5555}]
alua:
  groups:
    - {id: 1, state: active/optimized, ports: [1]}
    - {id: 2, state: standby, ports: [2]}
`)
	deps := loginLineDeps{devices: func() ([]daemon.Device, error) { t.Fatal("the identity is configured"); return nil, nil }}
	out, _, err := run(t, deps, "login-line", "--config", file)
	require.NoError(t, err)
	const sys = `" > /sys/class/infiniband_srp/srp-<dev>-<port>/add_target`
	require.Contains(t, out, `echo "id_ext=0002c90300a0b0c1,ioc_guid=0002c90300a0b0c1,dest=192.168.1.10:5555`+sys+`
# Target port id_ext=0002c90300a0b0c2 ioc_guid=0002c90300a0b0c1 (relative port 2), another path to the same LUNs:
echo "id_ext=0002c90300a0b0c2,ioc_guid=0002c90300a0b0c1,dest=192.168.1.10:5555`+sys+`
`)
}

// Under systemd, stderr is the journal's stream: each line carries its syslog priority as a
// <N> prefix (sd-daemon(3)), which journald turns into PRIORITY=, so that journalctl -p err
// shows the daemon's errors; the line has no time or level of its own.
func TestLoggerJournalPriorities(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "journal")
	require.NoError(t, err)
	defer f.Close()
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(f.Fd()), &st))

	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino+1))
	require.False(t, isJournalStream(f), "another stream than the journal's")
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	require.True(t, isJournalStream(f))
	require.False(t, isJournalStream(&bytes.Buffer{}))

	log, err := newLogger(f, logAuto, "debug")
	require.NoError(t, err)
	log.Debug("debug line", zap.Int("lun", 3))
	log.Info("info line")
	log.Warn("warn line")
	log.Error("start-up failed", zap.String("error", "luns[0].backstore: \"memroy\" is not one of file"))
	log.DPanic("dpanic line\nsecond line")
	require.NoError(t, log.Sync())
	data, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	require.Equal(t, `<7>debug line	{"lun": 3}
<6>info line
<4>warn line
<3>start-up failed	{"error": "luns[0].backstore: \"memroy\" is not one of file"}
<2>dpanic line second line
`, string(data))

	// json keeps its form, with the priority in front when stderr is the journal.
	require.NoError(t, f.Truncate(0))
	_, err = f.Seek(0, 0)
	require.NoError(t, err)
	log, err = newLogger(f, logJSON, "info")
	require.NoError(t, err)
	log.Warn("w")
	data, err = os.ReadFile(f.Name())
	require.NoError(t, err)
	require.Regexp(t, `^<4>\{"level":"warn","ts":"[^"]+","msg":"w"\}\n$`, string(data))

	// Elsewhere (a terminal, a file) auto is console: a time and the level, no prefix.
	t.Setenv("JOURNAL_STREAM", "")
	var buf bytes.Buffer
	log, err = newLogger(&buf, logAuto, "info")
	require.NoError(t, err)
	log.Error("e")
	require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\tERROR\te\n$`, buf.String())
	// journal asked for explicitly: the prefix whatever the stream.
	buf.Reset()
	log, err = newLogger(&buf, logJournal, "warn")
	require.NoError(t, err)
	log.Info("hidden")
	log.Warn("shown")
	require.Equal(t, "<4>shown\n", buf.String())
}

// A command's stderr under systemd (srptarget reload as ExecReload=) reaches the journal at
// priority err: every line starts with <3>, however the writes split it.
func TestLinePrefixWriter(t *testing.T) {
	var buf bytes.Buffer
	w := &linePrefixWriter{w: &buf, prefix: "<3>"}
	for _, s := range []string{"a.yaml:4: luns[0].backstore: bad\nreload ", "refused: 1 error", "\n", "\nlast\n"} {
		n, err := w.Write([]byte(s))
		require.NoError(t, err)
		require.Equal(t, len(s), n)
	}
	require.Equal(t, "<3>a.yaml:4: luns[0].backstore: bad\n<3>reload refused: 1 error\n<3>\n<3>last\n", buf.String())
}

// validate names the paths the shipped systemd unit would hide or make read-only, and knows
// the ReadWritePaths= of the drop-ins.
func TestValidateSandboxWarnings(t *testing.T) {
	dir := t.TempDir()
	dropIns := filepath.Join(dir, "srptarget.service.d")
	require.NoError(t, os.MkdirAll(dropIns, 0o755))
	old := daemon.UnitDropInDir
	daemon.UnitDropInDir = dropIns
	t.Cleanup(func() { daemon.UnitDropInDir = old })
	cfg := &config.Config{StateDir: "/srv/state", LUNs: []config.LUN{
		{Backstore: "file", Path: "/srv/luns/a.img"},
		{Backstore: "file", Path: "/home/x.img"},
		{Backstore: "file", Path: "/srv/ro/b.img", ReadOnly: true},
		{Backstore: "file", Path: "/var/lib/srptarget/c.img"},
		{Backstore: "block", Path: "/dev/sdb"},
	}}
	msgs := func() []string {
		var out []string
		for _, w := range daemon.ShippedSandbox(dropIns).Check(cfg) {
			out = append(out, strings.TrimPrefix(w.Error(), ": "))
		}
		return out
	}
	require.Equal(t, []string{
		"luns[0].path: the systemd unit makes /srv/luns/a.img read-only for the daemon (ProtectSystem=strict): add ReadWritePaths=/srv/luns in a drop-in (systemctl edit srptarget), or move it under /var/lib/srptarget",
		"luns[1].path: /home/x.img is under /home, which the systemd unit hides from the daemon (ProtectHome=yes): move it, e.g. under /var/lib/srptarget",
		"state_dir: the systemd unit makes /srv/state read-only for the daemon (ProtectSystem=strict): add ReadWritePaths=/srv/state in a drop-in (systemctl edit srptarget), or move it under /var/lib/srptarget",
	}, msgs())
	require.NoError(t, os.WriteFile(filepath.Join(dropIns, "paths.conf"), []byte("[Service]\nReadWritePaths=/srv/luns -/srv/state\nProtectHome=no\n"), 0o644))
	require.Equal(t, []string{
		"luns[1].path: the systemd unit makes /home/x.img read-only for the daemon (ProtectSystem=strict): add ReadWritePaths=/home in a drop-in (systemctl edit srptarget), or move it under /var/lib/srptarget",
	}, msgs(), "ProtectHome=no shows /home, still read-only")
}
