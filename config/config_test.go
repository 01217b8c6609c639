package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore/rbd"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
)

const goodConfig = `
target:
  id_ext: "0x0002c90300a0b0c1"
  ioc_guid: 0002:c903:00a0:b0c1
listeners:
  - address: 0.0.0.0
    port: 5555
  - address: "fe80::1%eth0"
    port: 5555
limits:
  credits: 64
  max_transfer_size: 4MiB
luns:
  - lun: 0
    backstore: memory
    size: 1GiB
  - lun: 1
    backstore: null
    size: 64MiB
    block_size: 4096
    vendor: LIO-ORG
    write_cache: false
acls:
  - initiators: ["*"]
    luns: [0]
  - sources: ["10.0.0.0/8", "192.168.1.7"]
    luns: [0, 1]
    read_only: true
`

func TestParseGoodFillsDefaults(t *testing.T) {
	cfg, err := Parse("good.yaml", []byte(goodConfig))
	require.NoError(t, err)
	require.Equal(t, Size(DefaultMaxIUSize), cfg.Limits.MaxIUSize)
	require.Equal(t, 64, cfg.Limits.Credits)
	require.Equal(t, DefaultMaxChannels, cfg.Limits.MaxChannels)
	require.Equal(t, Size(4<<20), cfg.Limits.MaxTransferSize)
	require.Len(t, cfg.LUNs, 2)
	require.Equal(t, Size(1<<30), cfg.LUNs[0].Size)
	require.Equal(t, 512, cfg.LUNs[0].BlockSize)
	require.Equal(t, 4096, cfg.LUNs[1].BlockSize)
	require.NotNil(t, cfg.LUNs[1].WriteCache)
	require.False(t, *cfg.LUNs[1].WriteCache)
	require.True(t, cfg.ACLs[1].ReadOnly)
	require.Equal(t, DefaultSendQueueDepth, cfg.Limits.SendQueueDepth)
	require.Equal(t, Size(DefaultBufferPoolSize), cfg.Limits.BufferPoolSize)
	require.True(t, *cfg.Limits.ImmediateData)
	lim := cfg.SRPLimits()
	require.Equal(t, srp.DefaultRDMATimeout, lim.RDMATimeout)
	require.Equal(t, int64(DefaultBufferPoolSize/4), lim.MaxInitiatorBuffer)
	require.Equal(t, srp.DefaultMaxSessions, lim.MaxSessions)
	require.Equal(t, srp.DefaultMaxChannelsTotal, lim.MaxChannelsTotal)
	require.Equal(t, srp.DefaultMaxLoginsInProgress, lim.MaxLoginsInProgress)
}

func TestParseShare(t *testing.T) {
	for _, tc := range []struct {
		in   string
		pool int64
		want int64
	}{
		{"25%", 64 << 20, 16 << 20},
		{"100%", 64 << 20, 64 << 20},
		{"1%", 64 << 20, 671088},
		{"1%", 100 << 10, 4096}, // never below one 4 KiB buffer
		{"16MiB", 64 << 20, 16 << 20},
		{"4096", 64 << 20, 4096},
	} {
		got, err := parseShare(tc.in, tc.pool)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{"", "%", "101%", "-5%", "2.5%", "1GB", "128MiB"} {
		_, err := parseShare(bad, 64<<20)
		require.Error(t, err, bad)
	}
}

func TestParseErrorsNameLineAndKey(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "disk.img")
	require.NoError(t, os.WriteFile(existing, make([]byte, 4096), 0o600))
	tests := []struct {
		name string
		yaml string
		want []string // each error's text, in order
	}{
		{"unknown key", "listeners: [{address: 0.0.0.0, port: 1}]\nluns:\n  - lun: 0\n    backstore: memory\n    sise: 1GiB\n",
			[]string{"t.yaml:5: luns[0].sise: unknown key (did you mean size?)"}},
		{"no listener", "luns: []\n", []string{"t.yaml:1: listeners: at least one listener is needed (address and port)"}},
		{"ACL names", "listeners: [{address: 0.0.0.0, port: 1}]\nluns: [{lun: 0, backstore: memory, size: 1MiB}]\nacls:\n" +
			"  - {name: db, initiators: [\"*\"], luns: [0]}\n  - {name: db, sources: [10.0.0.0/8], luns: [0]}\n  - {name: \"a b\", sources: [10.0.0.0/8], luns: [0]}\n",
			[]string{
				`t.yaml:5: acls[1].name: "db" is the name of acls[0] too: names are unique`,
				`t.yaml:6: acls[2].name: "a b": use letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit)`,
			}},
		{"duplicate lun and bad size", `listeners: [{address: 0.0.0.0, port: 1}]
luns:
  - lun: 3
    backstore: memory
    size: 1000
  - lun: 3
    backstore: memory
    size: 1MiB
`, []string{
			"t.yaml:5: luns[0].size: 1000 is not a multiple of the block size 512",
			"t.yaml:6: luns[1].lun: LUN 3 is defined twice (also luns[0])",
		}},
		{"file missing without create", "listeners: [{address: 0.0.0.0, port: 1}]\nluns:\n  - lun: 0\n    backstore: file\n    path: /nonexistent/x.img\n",
			[]string{"t.yaml:5: luns[0].path: /nonexistent/x.img does not exist (set create: true and a size to make it)"}},
		{"block that is a file", "listeners: [{address: 0.0.0.0, port: 1}]\nluns:\n  - lun: 0\n    backstore: block\n    path: " + existing + "\n",
			[]string{"t.yaml:5: luns[0].path: " + existing + " is not a block device"}},
		{"acl refers to missing lun", "listeners: [{address: 0.0.0.0, port: 1}]\nluns: [{lun: 0, backstore: null, size: 1MiB}]\nacls:\n  - initiators: [\"0x12\"]\n    luns: [0, 7]\n",
			[]string{
				"t.yaml:4: acls[0].initiators[0]: \"0x12\": an initiator port id has 32 hex digits",
				"t.yaml:5: acls[0].luns[1]: LUN 7 is not defined under luns",
			}},
		{"link-local without zone", "listeners: [{address: \"fe80::1\", port: 1}]\n",
			[]string{"t.yaml:1: listeners[0].address: \"fe80::1\" is link-local: add the interface, e.g. fe80::1%eth0"}},
		{"decimal unit refused", "listeners: [{address: 0.0.0.0, port: 1}]\nluns: [{lun: 0, backstore: null, size: 1GB}]\n",
			[]string{"t.yaml:2: luns[0].size: size \"1GB\": unknown unit \"GB\" (use KiB, MiB, GiB, TiB, PiB, or K, M, G, T: units are binary)"}},
		{"create on memory", "listeners: [{address: 0.0.0.0, port: 1}]\nluns: [{lun: 0, backstore: memory, size: 1MiB, create: true}]\n",
			[]string{"t.yaml:2: luns[0].create: create applies to files only"}},
		{"block_size on a block device", "listeners: [{address: 0.0.0.0, port: 1}]\nluns:\n  - lun: 0\n    backstore: block\n    path: /dev/null\n    block_size: 4096\n",
			[]string{
				"t.yaml:5: luns[0].path: /dev/null is not a block device",
				"t.yaml:6: luns[0].block_size: a block device has its own block size; remove block_size",
			}},
		{"physical_block_size", "listeners: [{address: 0.0.0.0, port: 1}]\nluns:\n  - {lun: 0, backstore: memory, size: 1MiB, block_size: 4096, physical_block_size: 512}\n  - {lun: 1, backstore: memory, size: 1MiB, physical_block_size: 3072}\n  - {lun: 2, backstore: memory, size: 1MiB, physical_block_size: 131072}\n  - {lun: 3, backstore: memory, size: 1MiB, physical_block_size: 4096}\n",
			[]string{
				"t.yaml:3: luns[0].physical_block_size: 512: a power of two from the block size (4096) to 65536",
				"t.yaml:4: luns[1].physical_block_size: 3072: a power of two from the block size (512) to 65536",
				"t.yaml:5: luns[2].physical_block_size: 131072: a power of two from the block size (512) to 65536",
			}},
		{"limits out of range", "listeners: [{address: 0.0.0.0, port: 1}]\nlimits:\n  max_it_iu_len: 100\n  send_queue_depth: 8\n  max_transfer_size: 16MiB\n  buffer_pool_size: 8MiB\n",
			[]string{
				"t.yaml:3: limits.max_it_iu_len: 100 is outside 276..1MiB (Linux with immediate data needs 8260)",
				"t.yaml:4: limits.send_queue_depth: 8 is outside 16..65536",
				"t.yaml:6: limits.buffer_pool_size: 8MiB must be at least max_transfer_size (16MiB) and at most 64GiB",
			}},
		{"completion mode and poll window", "listeners: [{address: 0.0.0.0, port: 1}]\nlimits:\n  completion: spin\n  poll_window: 5s\n",
			[]string{
				"t.yaml:3: limits.completion: \"spin\" is not a completion mode: use event, adaptive or poll",
				"t.yaml:4: limits.poll_window: \"5s\" must be a duration between 1us and 1s, such as 50us",
			}},
		{"scheduling policy", "listeners: [{address: 0.0.0.0, port: 1}]\nlimits:\n  scheduling: fifo\n",
			[]string{"t.yaml:3: limits.scheduling: \"fifo\" is not a scheduling policy: use inherit, normal or batch"}},
		{"isolation limits out of range", "listeners: [{address: 0.0.0.0, port: 1}]\nlimits:\n  rdma_timeout: 10ms\n  max_initiator_buffer: 0%\n  max_sessions: -1\n  max_channels_total: 8\n  max_logins_in_progress: 5000\n",
			[]string{
				"t.yaml:3: limits.rdma_timeout: \"10ms\" must be a duration between 100ms and 1h, such as 30s",
				"t.yaml:4: limits.max_initiator_buffer: \"0%\": a percentage must be a whole number from 1% to 100% of buffer_pool_size",
				"t.yaml:5: limits.max_sessions: -1 is outside 1..65536",
				"t.yaml:6: limits.max_channels_total: 8 is less than max_channels (16): no initiator could open max_channels channels",
				"t.yaml:7: limits.max_logins_in_progress: 5000 is outside 1..1024",
			}},
		{"initiator buffer above the pool", "listeners: [{address: 0.0.0.0, port: 1}]\nlimits:\n  max_initiator_buffer: 1GiB\n",
			[]string{"t.yaml:3: limits.max_initiator_buffer: 1GiB is more than buffer_pool_size (64MiB)"}},
		{"the per-channel share's old key", "listeners: [{address: 0.0.0.0, port: 1}]\nlimits:\n  max_channel_buffer: 25%\n",
			[]string{"t.yaml:3: limits.max_channel_buffer: replaced by max_initiator_buffer, the share of the pool one initiator may hold whatever its number of channels: rename the key"}},
		{"per-source shares above the totals and a bad idle timeout", "listeners: [{address: 0.0.0.0, port: 1}]\nlimits:\n  max_sessions: 8\n  max_sessions_per_source: 9\n  max_channels_total: 16\n  max_channels_per_source: 17\n  idle_timeout: 10ms\n",
			[]string{"t.yaml:4: limits.max_sessions_per_source: 9 is more than max_sessions (8)",
				"t.yaml:6: limits.max_channels_per_source: 17 is more than max_channels_total (16)",
				"t.yaml:7: limits.idle_timeout: \"10ms\" must be 0 (off) or a duration between 1s and 24h, such as 10m"}},
		{"bad target id", "target: {id_ext: \"0x12\"}\nlisteners: [{address: 0.0.0.0, port: 1}]\n",
			[]string{"t.yaml:1: target.id_ext: \"0x12\": want 16 hex digits (a 64-bit identifier such as 0x0002c90300a0b0c1)"}},
		{"target ports", `target:
  relative_port_id: 2
  ports:
    - relative_port_id: 2
    - id_ext: "0002c90300a0b0c2"
    - id_ext: "0002c90300a0b0c2"
      relative_port_id: 3
listeners: [{address: 0.0.0.0, port: 1}]
`, []string{
			"t.yaml:4: target.ports[0].id_ext: id_ext is missing: each target port needs its own",
			"t.yaml:4: target.ports[0].relative_port_id: relative port 2 is target's already",
			"t.yaml:5: target.ports[1].relative_port_id: relative_port_id is missing or 0: each target port needs its own, 1 to 65535",
			"t.yaml:6: target.ports[2].id_ext: same id_ext as target.ports[1]",
		}},
		{"alua groups", `target:
  ports: [{id_ext: "0002c90300a0b0c2", relative_port_id: 2}]
listeners: [{address: 0.0.0.0, port: 1}]
alua:
  groups:
    - state: active
      ports: [1, 0]
    - id: 70000
      state: standby
      ports: []
`, []string{
			"t.yaml:5: alua.groups: relative target port 2 (target.ports[0]) is in no target port group",
			"t.yaml:6: alua.groups[0].id: id is missing (a target port group number, 0 to 65535)",
			"t.yaml:6: alua.groups[0].state: \"active\" is not an asymmetric access state: use active/optimized, active/non-optimized, standby, unavailable or transitioning",
			"t.yaml:7: alua.groups[0].ports[1]: 0 is outside 1..65535",
			"t.yaml:8: alua.groups[1].id: 70000 is outside 0..65535",
			"t.yaml:10: alua.groups[1].ports: no relative target port listed",
		}},
		{"alua port in two groups", `listeners: [{address: 0.0.0.0, port: 1}]
alua:
  groups:
    - {id: 1, state: standby, ports: [1, 5]}
    - {id: 1, state: standby, ports: [5]}
`, []string{"t.yaml:3: alua.groups: target port group 1 is listed twice"}},
		{"empty alua", "listeners: [{address: 0.0.0.0, port: 1}]\nalua: {groups: []}\n",
			[]string{"t.yaml:2: alua.groups: no target port group: list at least one, or remove alua"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.yaml))
			require.Equal(t, tc.want, errorLines(t, err))
		})
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]Size{"4096": 4096, "512KiB": 512 << 10, "10GiB": 10 << 30, "1T": 1 << 40, " 8 MiB ": 8 << 20} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-1", "1.5GiB", "1GB", "99999999999999999999", "9000000PiB"} {
		_, err := ParseSize(in)
		require.Error(t, err, in)
	}
	require.Equal(t, "10GiB", Size(10<<30).String())
	require.Equal(t, "1000", Size(1000).String())
}

func TestMatchInitiatorAndSources(t *testing.T) {
	id := "0x4e49c9ffff0a0b0c0002c90300a0b0c1"
	require.True(t, MatchInitiator("*", id))
	require.True(t, MatchInitiator("0x4E49C9FFFF0A0B0C*", id))
	require.False(t, MatchInitiator("0x5e49*", id))
	p, err := ParseSourcePrefix("192.168.1.7")
	require.NoError(t, err)
	require.True(t, p.Contains(netip.MustParseAddr("192.168.1.7")))
	require.False(t, p.Contains(netip.MustParseAddr("192.168.1.8")))
	p, err = ParseSourcePrefix("10.1.2.3/8")
	require.NoError(t, err)
	require.Equal(t, "10.0.0.0/8", p.String())
}

func TestParseRBD(t *testing.T) {
	const head = "listeners: [{address: 0.0.0.0, port: 1}]\nluns:\n  - lun: 0\n"
	cfg, err := Parse("t.yaml", []byte(head+"    backstore: rbd\n    block_size: 4096\n    rbd: {image: disk0, mon_host: 127.0.0.1, rados_osd_op_timeout: 3s}\n"))
	require.NoError(t, err)
	r := cfg.LUNs[0].RBD
	require.Equal(t, RBD{Options: rbd.Options{Pool: "rbd", Image: "disk0", MonHost: "127.0.0.1", MountTimeout: rbd.DefaultMountTimeout, OSDOpTimeout: 3 * time.Second},
		PRStore: "rados", PRLease: Duration(5 * time.Second)}, *r)
	require.Equal(t, "rbd/disk0", r.ImageName())
	r.Namespace = "ns"
	require.Equal(t, "rbd/ns/disk0", r.ImageName())
	if !rbd.Built {
		require.Len(t, cfg.warnings, 1)
		require.Contains(t, cfg.warnings[0].Error(), "built without RBD support")
	} else {
		require.Empty(t, cfg.warnings)
	}

	for _, tc := range []struct {
		name, lun string
		want      []string
	}{
		{"no rbd mapping", "    backstore: rbd\n", []string{"t.yaml:3: luns[0].rbd.image: an rbd backstore needs rbd: {image: NAME} (and pool, default rbd)"}},
		{"no image", "    backstore: rbd\n    rbd: {pool: p}\n", []string{"t.yaml:5: luns[0].rbd.image: an rbd backstore needs rbd: {image: NAME} (and pool, default rbd)"}},
		{"bad names and paths", "    backstore: rbd\n    rbd: {pool: a/b, image: x@snap, keyring: k}\n", []string{
			`t.yaml:5: luns[0].rbd.pool: "a/b": a name has no /, @ or control characters`,
			`t.yaml:5: luns[0].rbd.image: "x@snap": a name has no /, @ or control characters`,
			"t.yaml:5: luns[0].rbd.keyring: k is a relative path: write the whole path, from /",
		}},
		{"timeouts", "    backstore: rbd\n    rbd: {image: i, rados_mount_timeout: 500ms, rados_osd_op_timeout: 1h, pr_lease: 2m}\n", []string{
			`t.yaml:5: luns[0].rbd.rados_mount_timeout: 500ms must be between 1s and 1h, such as 20s`,
			`t.yaml:5: luns[0].rbd.rados_osd_op_timeout: 1h must be between 1s and 10m, such as 20s`,
			`t.yaml:5: luns[0].rbd.pr_lease: 2m must be between 1s and 1m, such as 20s`,
		}},
		{"not a duration", "    backstore: rbd\n    rbd: {image: i, rados_osd_op_timeout: soon}\n", []string{
			`t.yaml:5: luns[0].rbd.rados_osd_op_timeout: "soon" is not a duration: write a number and a unit (ns, us, ms, s, m, h), such as 30s or 1m30s`,
		}},
		{"file keys", "    backstore: rbd\n    size: 1GiB\n    create: true\n    rbd: {image: i}\n", []string{
			"t.yaml:5: luns[0].size: an RBD image has its own size; remove size (rbd resize changes it, online)",
			"t.yaml:6: luns[0].create: create applies to files only (make the image with rbd create)",
		}},
		{"rbd on a memory LUN", "    backstore: memory\n    size: 1MiB\n    rbd: {image: i}\n", []string{"t.yaml:6: luns[0].rbd: rbd applies to backstore: rbd only"}},
	} {
		_, err := Parse("t.yaml", []byte(head+tc.lun))
		require.Equal(t, tc.want, errorLines(t, err), tc.name)
	}
}

func TestParsePortGroups(t *testing.T) {
	cfg, err := Parse("t.yaml", []byte(`target:
  id_ext: "0002c90300a0b0c1"
  ports:
    - {id_ext: "0002c90300a0b0c2", relative_port_id: 7}
listeners: [{address: 0.0.0.0, port: 1}]
alua:
  groups:
    - {id: 0, state: active/non-optimized, ports: [1]}
    - {id: 9, state: unavailable, preferred: true, ports: [7, 300]}
`))
	require.NoError(t, err)
	require.Equal(t, []uint16{1, 7}, cfg.LocalPorts())
	require.Equal(t, []scsi.PortGroup{
		{ID: 0, State: scsi.ActiveNonOptimized, Ports: []uint16{1}},
		{ID: 9, State: scsi.Unavailable, Preferred: true, Ports: []uint16{7, 300}},
	}, cfg.PortGroups())

	// Without alua: one active/optimized group 0 of every local port.
	cfg, err = Parse("t.yaml", []byte(goodConfig))
	require.NoError(t, err)
	require.Equal(t, uint16(1), cfg.Target.RelativePortID)
	require.Equal(t, []scsi.PortGroup{{ID: 0, State: scsi.ActiveOptimized, Ports: []uint16{1}}}, cfg.PortGroups())
}
