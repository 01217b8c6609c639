package daemon

import (
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/srptest"
)

// findMetric returns the metric of family name whose labels include want, or nil.
func findMetric(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is the value of a counter or gauge, or the sample count of a histogram; -1 when the
// metric is missing.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	m := findMetric(fams, name, labels)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return -1
}

// gather collects a registry holding only c.
func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	fams, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// scrape fetches and parses http://addr/metrics.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	rsp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer rsp.Body.Close()
	require.Equal(t, http.StatusOK, rsp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rsp.Body)
	require.NoError(t, err)
	return fams
}

// collectedLU is a logical unit of 1 MiB in memory with serial, and a target with no
// listener: what a collector is given to read.
func collectedLU(t *testing.T, serial string) (*scsi.LogicalUnit, *srp.Target) {
	t.Helper()
	bs, err := backstore.NewMemory(1<<20, 512)
	require.NoError(t, err)
	lu, err := scsi.NewLogicalUnit(scsi.Config{Backstore: bs, Serial: serial})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lu.Close() })
	tgt, err := srp.New(srp.Config{TargetPortID: daemontest.TargetPortID})
	require.NoError(t, err)
	return lu, tgt
}

// TestDaemonCollector checks names, labels and values of the collector in-process, on a
// logical unit whose counters are set directly: every metric is described (the pedantic
// registry checks Collect against Describe), histogram buckets are cumulative in seconds, and
// each sense key gets its SPC-4 name.
func TestDaemonCollector(t *testing.T) {
	lu, tgt := collectedLU(t, "metrics0007")

	build := control.BuildInfo{Version: "0.1.0+0123456789ab", Release: "0.1.0", Commit: "0123456789abcdef",
		GoVersion: runtime.Version(), Backstores: []string{"file", "memory"}}
	c := &daemonCollector{build: build}
	before := gather(t, c)
	require.Len(t, before, 2, "nothing but srptarget_serving and srptarget_build_info before the daemon has started")
	require.Equal(t, 0.0, before["srptarget_serving"].GetMetric()[0].GetGauge().GetValue())
	bi := before["srptarget_build_info"].GetMetric()[0]
	require.Equal(t, 1.0, bi.GetGauge().GetValue())
	labels := map[string]string{}
	for _, l := range bi.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	require.Equal(t, map[string]string{
		"version": build.Version, "release": build.Release, "commit": build.Commit, "modified": strconv.FormatBool(build.Modified),
		"goversion": runtime.Version(), "backstores": strings.Join(build.Backstores, ","),
	}, labels)
	c.set(newMetricsView(tgt, map[int]*lunState{7: {num: 7, key: luKey{serial: "metrics0007"}, lu: lu}}, nil, nil))

	var cmd scsi.Command
	for _, tc := range []struct {
		class  scsi.OpClass
		reason scsi.Reason
		in     uint64
		out    uint64
		ns     int64
	}{
		{scsi.OpRead, scsi.ReasonNone, 4096, 0, 40e3},
		{scsi.OpRead, scsi.ReasonUnrecoveredReadError, 0, 0, 2e6},
		{scsi.OpWrite, scsi.ReasonNone, 0, 8192, 60e3},
		{scsi.OpOther, scsi.ReasonInvalidCommandOperationCode, 0, 0, 3e3},
		{scsi.OpOther, scsi.ReasonWriteProtected, 0, 0, 3e3},
	} {
		cmd.Reset()
		if tc.reason != scsi.ReasonNone {
			cmd.Status = scsi.StatusCheckCondition
			cmd.SenseLength = scsi.BuildSense(cmd.Sense[:], false, tc.reason, scsi.SenseInfo{})
		}
		lu.Stats().Complete(tc.class, &cmd, tc.in, tc.out, tc.ns)
	}
	require.True(t, lu.Hold()) // one command in flight

	fams := gather(t, c)
	lun := map[string]string{"lun": "7", "serial": "metrics0007"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for k, v := range lun {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"srptarget_lun_commands_total", with("op", "read"), 2},
		{"srptarget_lun_commands_total", with("op", "write"), 1},
		{"srptarget_lun_commands_total", with("op", "other"), 2},
		{"srptarget_lun_command_duration_seconds", with("op", "read"), 2},
		{"srptarget_lun_command_duration_seconds", with("op", "write"), 1},
		{"srptarget_lun_read_bytes_total", lun, 4096},
		{"srptarget_lun_written_bytes_total", lun, 8192},
		{"srptarget_lun_errors_total", with("sense_key", "MEDIUM ERROR"), 1},
		{"srptarget_lun_errors_total", with("sense_key", "ILLEGAL REQUEST"), 1},
		{"srptarget_lun_errors_total", with("sense_key", "DATA PROTECT"), 1},
		{"srptarget_lun_errors_total", with("sense_key", "NOT READY"), 0},
		{"srptarget_lun_errors_total", with("sense_key", "ABORTED COMMAND"), 0},
		{"srptarget_lun_commands_in_flight", lun, 1},
		{"srptarget_logins_accepted_total", nil, 0},
		{"srptarget_logins_rejected_total", map[string]string{"reason": "insufficient_resources"}, 0},
		{"srptarget_task_management_total", map[string]string{"function": "LOGICAL UNIT RESET"}, 0},
		{"srptarget_task_management_total", map[string]string{"function": "other"}, 0},
		{"srptarget_sessions", nil, 0},
		{"srptarget_channels", nil, 0},
		{"srptarget_busy_total", nil, 0},
		{"srptarget_rdma_errors_total", nil, 0},
		{"srptarget_rdma_stalls_total", nil, 0},
		{"srptarget_channels_idle_closed_total", nil, 0},
		{"srptarget_buffer_pool_in_use_bytes", nil, 0},
		{"srptarget_buffer_pool_size_bytes", nil, 0},
	} {
		require.Equal(t, tc.want, value(fams, tc.name, tc.labels), "%s%v", tc.name, tc.labels)
	}
	require.Len(t, fams["srptarget_lun_errors_total"].GetMetric(), len(exportedSenseKeys))
	require.Len(t, fams["srptarget_logins_rejected_total"].GetMetric(), 8)

	h := findMetric(fams, "srptarget_lun_command_duration_seconds", with("op", "read")).GetHistogram()
	require.InDelta(t, 2.04e-3, h.GetSampleSum(), 1e-12)
	for _, b := range h.GetBucket() {
		var want uint64
		switch le := b.GetUpperBound(); {
		case le >= 2e-3:
			want = 2
		case le >= 40e-6:
			want = 1
		}
		require.Equal(t, want, b.GetCumulativeCount(), "le %v", b.GetUpperBound())
	}
	for _, name := range []string{"srptarget_lun_commands_total", "srptarget_logins_accepted_total", "srptarget_lun_read_bytes_total"} {
		require.Equal(t, dto.MetricType_COUNTER, fams[name].GetType(), name)
	}
	require.Equal(t, dto.MetricType_GAUGE, fams["srptarget_lun_commands_in_flight"].GetType())
	require.Equal(t, dto.MetricType_HISTOGRAM, fams["srptarget_lun_command_duration_seconds"].GetType())
	lu.Release()
}

// TestMetricsEndpoint runs `serve --metrics 127.0.0.1:0`, does known I/O from an initiator
// over the in-memory fabric and reads the counters back from /metrics.
func TestMetricsEndpoint(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	addr := e.startWithEndpoint(&e.opts.MetricsAddr, "metrics", "/metrics")

	ch := e.MustLogin(daemontest.RWInitiator, "", 5555)
	_, err := e.Login(daemontest.StrangerInitiator, "", 5555)
	require.Error(t, err, "no ACL for this initiator")
	daemontest.ClearUA(t, ch, 0)
	ctx := t.Context()
	const writes, reads, blocks = 4, 6, 16
	for i := 0; i < writes; i++ {
		daemontest.Do(t, ch, &srptest.Request{CDB: srptest.CDBWrite10(uint32(i*blocks), blocks), DataOut: make([]byte, blocks*512)})
	}
	for i := 0; i < reads; i++ {
		rsp, err := ch.Read10(ctx, 0, uint32(i*blocks), blocks, 512)
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
	}
	rsp := daemontest.Do(t, ch, &srptest.Request{CDB: []byte{0xFF, 0, 0, 0, 0, 0}})
	daemontest.RequireSense(t, rsp, daemontest.SenseIllegalRequest, 0x20, 0x00)

	lun0 := func(kv ...string) map[string]string {
		m := map[string]string{"lun": "0", "serial": "0002c90300a342700000"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	// The counters move at the send completion of each response, which may come after the
	// initiator has it.
	var fams map[string]*dto.MetricFamily
	testutil.WaitFor(t, "the commands to end", func() bool {
		fams = scrape(t, addr)
		return value(fams, "srptarget_lun_commands_in_flight", lun0()) == 0 &&
			value(fams, "srptarget_lun_errors_total", lun0("sense_key", "ILLEGAL REQUEST")) == 1
	})
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"srptarget_lun_commands_total", lun0("op", "write"), writes},
		{"srptarget_lun_commands_total", lun0("op", "read"), reads},
		{"srptarget_lun_command_duration_seconds", lun0("op", "write"), writes},
		{"srptarget_lun_command_duration_seconds", lun0("op", "read"), reads},
		{"srptarget_lun_written_bytes_total", lun0(), writes * blocks * 512},
		{"srptarget_lun_read_bytes_total", lun0(), reads * blocks * 512},
		{"srptarget_lun_errors_total", lun0("sense_key", "MEDIUM ERROR"), 0},
		{"srptarget_lun_commands_total", map[string]string{"lun": "1", "op": "read"}, 0},
		{"srptarget_logins_accepted_total", nil, 1},
		{"srptarget_logins_rejected_total", map[string]string{"reason": "acl"}, 1}, // answered CHANNEL LIMIT REACHED, as LIO does
		{"srptarget_logins_rejected_total", map[string]string{"reason": "channel_limit_reached"}, 0},
		{"srptarget_sessions", nil, 1},
		{"srptarget_channels", nil, 1},
		{"srptarget_buffer_pool_size_bytes", nil, 16 << 20},
	} {
		require.Equal(t, tc.want, value(fams, tc.name, tc.labels), "%s%v", tc.name, tc.labels)
	}
	// The clear of the unit attention: TEST UNIT READY, "other", with UNIT ATTENTION.
	require.GreaterOrEqual(t, value(fams, "srptarget_lun_errors_total", lun0("sense_key", "UNIT ATTENTION")), 1.0)
	require.Equal(t, value(fams, "srptarget_lun_commands_total", lun0("op", "other")),
		value(fams, "srptarget_lun_command_duration_seconds", lun0("op", "other")))
	require.NotNil(t, fams["go_goroutines"], "the Go runtime collector")

	status, body, err := httpGet("http://" + addr + "/srptarget-test-default-mux")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, status, body)

	e.stopClosesEndpoint("metrics", addr, "/metrics")
}

func TestMetricsAddressInUseFailsStart(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	requireAddressInUse(t, e, "--metrics", func(addr string) { e.opts.MetricsAddr = addr })
}

// metricsNotLoopback is the warning of a metrics endpoint that others than local users reach.
const metricsNotLoopback = "the metrics endpoint is not bound to localhost: whoever reaches it sees the LUNs, their load and the sessions"

func TestMetricsNotOnLoopbackWarns(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	requireNotLoopbackWarns(t, e, metricsNotLoopback, func(addr string) { e.opts.MetricsAddr = addr })
}
