package daemon

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/srp/srptest"
)

// e2eNamed is e2eConfig with named ACLs, the first with per-initiator metrics.
var e2eNamed = strings.Replace(strings.Replace(daemontest.E2EConfig,
	`  - initiators: ["0x0000000000000000000000000000aaaa"]`,
	"  - name: db-hosts\n    per_initiator_metrics: true\n    initiators: [\"0x0000000000000000000000000000aaaa\"]", 1),
	`  - sources: ["198.51.100.0/24"]`, "  - name: backup\n    sources: [\"198.51.100.0/24\"]", 1)

// TestPerInitiatorStats: two initiators do known I/O; sessions, luns, stats and /metrics say
// who did what, per session and per LUN, under the ACLs' names (the first ACL's initiator
// with a label of its own), and the counts match the I/O done.
func TestPerInitiatorStats(t *testing.T) {
	e := newControlEnv(t, e2eNamed)
	addr := e.startWithEndpoint(&e.opts.MetricsAddr, "metrics", "/metrics")
	rw := e.MustLogin(daemontest.RWInitiator, "", 5555)
	ro := e.MustLogin(daemontest.ROInitiator, "198.51.100.7", 5555)
	start := time.Now().Truncate(time.Second)
	daemontest.ClearUA(t, rw, 0)
	daemontest.ClearUA(t, rw, 1)
	daemontest.ClearUA(t, ro, 1)
	ctx := t.Context()
	const blocks = 16
	for i := range 4 {
		daemontest.Do(t, rw, &srptest.Request{LUN: 0, CDB: srptest.CDBWrite10(uint32(i*blocks), blocks), DataOut: make([]byte, blocks*512)})
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
	rsp := daemontest.Do(t, ro, &srptest.Request{LUN: 1, CDB: srptest.CDBWrite10(0, 1), DataOut: make([]byte, 512)})
	daemontest.RequireSense(t, rsp, daemontest.SenseDataProtect, 0x27, 0x00)
	// clearUA: two TEST UNIT READYs per LUN, the first a CHECK CONDITION.
	wantRW := control.IOCounts{Commands: 2 + 4 + 2 + 6, WrittenBytes: 4 * blocks * 512, ReadBytes: 6 * blocks * 512, Errors: 2}
	// The refused WRITE's data came with it (immediate data): received, so counted.
	wantRO := control.IOCounts{Commands: 2 + 3 + 1, ReadBytes: 3 * blocks * 512, WrittenBytes: 512, Errors: 1 + 1}

	var ss []control.SessionInfo
	require.Eventually(t, func() bool {
		e.ctlJSON(&ss, "sessions")
		return len(ss) == 2 && ss[0].IO.Commands == wantRW.Commands && ss[1].IO.Commands == wantRO.Commands
	}, 5*time.Second, 10*time.Millisecond)
	for i, want := range []control.IOCounts{wantRW, wantRO} {
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
	require.Equal(t, &control.ACLRef{Index: 0, Name: "db-hosts", Description: "initiators 0x0000000000000000000000000000aaaa"}, ss[0].ACL)

	var ls []control.LUNInfo
	e.ctlJSON(&ls, "luns")
	require.Equal(t, []string{daemontest.RWInitiator.String(), daemontest.ROInitiator.String()}, []string{ls[1].Initiators[0].Initiator, ls[1].Initiators[1].Initiator}, "busiest first")
	require.Equal(t, "db-hosts", ls[1].Initiators[0].ACL)
	require.Equal(t, uint64(8), ls[1].Initiators[0].Commands)
	require.Equal(t, uint64(6), ls[1].Initiators[1].Commands)
	require.Equal(t, uint64(8+6), ls[1].IO.Commands, "the logical unit's own count is the sum")
	require.Equal(t, uint64(9*blocks*512), ls[1].IO.ReadBytes)
	require.Equal(t, uint64(512), ls[1].IO.WrittenBytes)
	require.Equal(t, uint64(3), ls[1].IO.Errors)

	got := map[string]int64{}
	var entries []control.StatEntry
	e.ctlJSON(&entries, "stats")
	for _, s := range entries {
		if s.Initiator == daemontest.RWInitiator.String() {
			require.Equal(t, "db-hosts", s.ACL)
			got[s.Name] = s.Value
		}
	}
	require.Equal(t, int64(wantRW.Commands), got["initiator_commands"])
	require.Equal(t, int64(wantRW.ReadBytes), got["initiator_read_bytes"])
	require.Equal(t, int64(wantRW.WrittenBytes), got["initiator_written_bytes"])
	require.GreaterOrEqual(t, got["initiator_last_active"], start.Unix())

	fams := scrape(t, addr)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"srptarget_initiator_commands_total", map[string]string{"acl": "db-hosts", "initiator": daemontest.RWInitiator.String(), "lun": "1"}, 8},
		{"srptarget_initiator_read_bytes_total", map[string]string{"acl": "db-hosts", "initiator": daemontest.RWInitiator.String(), "lun": "1"}, 6 * blocks * 512},
		{"srptarget_initiator_written_bytes_total", map[string]string{"acl": "db-hosts", "initiator": daemontest.RWInitiator.String(), "lun": "0"}, 4 * blocks * 512},
		{"srptarget_initiator_commands_total", map[string]string{"acl": "backup", "initiator": "", "lun": "1"}, 6},
		{"srptarget_initiator_errors_total", map[string]string{"acl": "backup", "initiator": "", "lun": "1"}, 2},
	} {
		require.Equal(t, tc.want, value(fams, tc.name, tc.labels), "%s%v", tc.name, tc.labels)
	}
	last := findMetric(fams, "srptarget_initiator_last_active_timestamp_seconds", map[string]string{"acl": "backup", "initiator": ""})
	require.NotNil(t, last)
	require.GreaterOrEqual(t, last.GetGauge().GetValue(), float64(start.Unix()))
	require.NoError(t, e.Stop(syscall.SIGTERM))
}
