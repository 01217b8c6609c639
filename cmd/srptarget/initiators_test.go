package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/srp/srptest"
)

// e2eNamed is e2eConfig with named ACLs, the first with per-initiator metrics.
var e2eNamed = strings.Replace(strings.Replace(e2eConfig,
	`  - initiators: ["0x0000000000000000000000000000aaaa"]`,
	"  - name: db-hosts\n    per_initiator_metrics: true\n    initiators: [\"0x0000000000000000000000000000aaaa\"]", 1),
	`  - sources: ["198.51.100.0/24"]`, "  - name: backup\n    sources: [\"198.51.100.0/24\"]", 1)

// TestPerInitiatorStats: two initiators do known I/O; sessions, luns, stats and /metrics say
// who did what, per session and per LUN, under the ACLs' names (the first ACL's initiator
// with a label of its own), and the counts match the I/O done.
func TestPerInitiatorStats(t *testing.T) {
	registerOnDefaultMux()
	e := newControlEnv(t, e2eNamed)
	e.opts.metricsAddr = "127.0.0.1:0"
	e.start()
	addr := e.endpointAddr("metrics", "/metrics")
	rw := e.mustLogin(rwInitiator, "", 5555)
	ro := e.mustLogin(roInitiator, "198.51.100.7", 5555)
	start := time.Now().Truncate(time.Second)
	clearUA(t, rw, 0)
	clearUA(t, rw, 1)
	clearUA(t, ro, 1)
	ctx := t.Context()
	const blocks = 16
	for i := range 4 {
		do(t, rw, &srptest.Request{LUN: 0, CDB: srptest.CDBWrite10(uint32(i*blocks), blocks), DataOut: make([]byte, blocks*512)})
	}
	for i := range 6 {
		rsp, err := rw.Read10(ctx, 1, uint32(i*blocks), blocks, 512)
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
	}
	for i := range 3 {
		rsp, err := ro.Read10(ctx, 1, uint32(i*blocks), blocks, 512)
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
	}
	rsp := do(t, ro, &srptest.Request{LUN: 1, CDB: srptest.CDBWrite10(0, 1), DataOut: make([]byte, 512)})
	requireSense(t, rsp, senseDataProtect, 0x27, 0x00)
	// clearUA: two TEST UNIT READYs per LUN, the first a CHECK CONDITION.
	wantRW := ioCounts{Commands: 2 + 4 + 2 + 6, WrittenBytes: 4 * blocks * 512, ReadBytes: 6 * blocks * 512, Errors: 2}
	// The refused WRITE's data came with it (immediate data): received, so counted.
	wantRO := ioCounts{Commands: 2 + 3 + 1, ReadBytes: 3 * blocks * 512, WrittenBytes: 512, Errors: 1 + 1}

	var ss []sessionInfo
	require.Eventually(t, func() bool {
		e.ctlJSON(&ss, "sessions")
		return len(ss) == 2 && ss[0].IO.Commands == wantRW.Commands && ss[1].IO.Commands == wantRO.Commands
	}, 5*time.Second, 10*time.Millisecond)
	for i, want := range []ioCounts{wantRW, wantRO} {
		got := ss[i].IO
		require.NotNil(t, got.LastActive)
		require.False(t, got.LastActive.Before(start), "%v", got.LastActive)
		got.LastActive = nil
		require.Equal(t, want, got, ss[i].Initiator)
	}
	require.Equal(t, "db-hosts", ss[0].ACL.Name)
	require.Equal(t, "backup", ss[1].ACL.Name)
	require.Len(t, ss[0].LUNIO, 2)
	require.Equal(t, uint64(2+4), ss[0].LUNIO[0].Commands)
	require.Equal(t, uint64(4*blocks*512), ss[0].LUNIO[0].WrittenBytes)
	require.Equal(t, uint64(2+6), ss[0].LUNIO[1].Commands)
	out, _, err := e.ctl("sessions")
	require.NoError(t, err)
	require.Contains(t, out, "admitted by acls[0] db-hosts (initiators 0x0000000000000000000000000000aaaa)")
	require.Contains(t, out, "  I/O: 14 commands, 48 KiB read, 32 KiB written, 2 errors, last active ")
	require.Contains(t, out, "    LUN 1: 8 commands, 48 KiB read, 0 bytes written, 1 error, last active ")

	var ls []lunInfo
	e.ctlJSON(&ls, "luns")
	require.Equal(t, []string{rwInitiator.String(), roInitiator.String()}, []string{ls[1].Initiators[0].Initiator, ls[1].Initiators[1].Initiator}, "busiest first")
	require.Equal(t, "db-hosts", ls[1].Initiators[0].ACL)
	require.Equal(t, uint64(8), ls[1].Initiators[0].Commands)
	require.Equal(t, uint64(6), ls[1].Initiators[1].Commands)
	require.Equal(t, uint64(8+6), ls[1].IO.Commands, "the logical unit's own count is the sum")
	require.Equal(t, uint64(9*blocks*512), ls[1].IO.ReadBytes)
	out, _, err = e.ctl("luns", "1")
	require.NoError(t, err)
	require.Contains(t, out, "  I/O: 14 commands, 72 KiB read, 512 bytes written, 3 errors, last active ")
	require.Contains(t, out, "    "+roInitiator.String()+" (backup): 6 commands, 24 KiB read, 512 bytes written, 2 errors, last active ")

	got := map[string]int64{}
	var entries []statEntry
	e.ctlJSON(&entries, "stats")
	for _, s := range entries {
		if s.Initiator == rwInitiator.String() {
			require.Equal(t, "db-hosts", s.ACL)
			got[s.Name] = s.Value
		}
	}
	require.Equal(t, int64(wantRW.Commands), got["initiator_commands"])
	require.Equal(t, int64(wantRW.ReadBytes), got["initiator_read_bytes"])
	require.Equal(t, int64(wantRW.WrittenBytes), got["initiator_written_bytes"])
	require.GreaterOrEqual(t, got["initiator_last_active"], start.Unix())
	out, _, err = e.ctl("stats")
	require.NoError(t, err)
	require.Contains(t, out, "per initiator (bytes read: sent to it; written: received from it):\n  "+rwInitiator.String()+" (db-hosts): 14 commands, 48 KiB read, 32 KiB written, 2 errors, last active ")

	fams := scrape(t, addr)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"srptarget_initiator_commands_total", map[string]string{"acl": "db-hosts", "initiator": rwInitiator.String(), "lun": "1"}, 8},
		{"srptarget_initiator_read_bytes_total", map[string]string{"acl": "db-hosts", "initiator": rwInitiator.String(), "lun": "1"}, 6 * blocks * 512},
		{"srptarget_initiator_written_bytes_total", map[string]string{"acl": "db-hosts", "initiator": rwInitiator.String(), "lun": "0"}, 4 * blocks * 512},
		{"srptarget_initiator_commands_total", map[string]string{"acl": "backup", "initiator": "", "lun": "1"}, 6},
		{"srptarget_initiator_errors_total", map[string]string{"acl": "backup", "initiator": "", "lun": "1"}, 2},
	} {
		require.Equal(t, tc.want, value(fams, tc.name, tc.labels), "%s%v", tc.name, tc.labels)
	}
	last := findMetric(fams, "srptarget_initiator_last_active_timestamp_seconds", map[string]string{"acl": "backup", "initiator": ""})
	require.NotNil(t, last)
	require.GreaterOrEqual(t, last.GetGauge().GetValue(), float64(start.Unix()))
	require.NoError(t, e.stop(syscall.SIGTERM))
}
