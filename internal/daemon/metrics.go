package daemon

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/internal/accept"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
)

// The metrics of `serve --metrics ADDR` (docs/metrics.md). The engine keeps plain atomic
// counters and fixed-bucket histograms (srp.Target.Stats, scsi.LogicalUnit.Stats); this
// collector reads them when Prometheus scrapes, so client_golang is never on the I/O path and
// a daemon without --metrics pays only for the atomic adds.

// metricsView is what the collector reads of the daemon: the target and the logical units of
// the running configuration, published by daemon.commit and shutdown. It is swapped as a
// whole (atomic.Pointer) so that a scrape never waits for a reload, which holds daemon.mu
// while it opens backstores.
type metricsView struct {
	target *srp.Target
	luns   []lunMetrics // in LUN order
	// serving reports whether a listener listens (srptarget_serving); nil: it does.
	serving func() bool
	// initiators sums the sessions' I/O counters by label (initiators.go); nil: none.
	initiators func() map[ioKey]srp.IOStats
}

// lunMetrics names one logical unit: its LUN (the same for every ACL: LUN numbers are global
// in the configuration) and its unit serial number.
type lunMetrics struct {
	lun    string
	serial string
	lu     *scsi.LogicalUnit
}

// newMetricsView builds the view of a running configuration.
func newMetricsView(t *srp.Target, luns map[int]*lunState, serving func() bool, initiators func() map[ioKey]srp.IOStats) *metricsView {
	v := &metricsView{target: t, luns: make([]lunMetrics, 0, len(luns)), serving: serving, initiators: initiators}
	for _, st := range luns {
		v.luns = append(v.luns, lunMetrics{lun: strconv.Itoa(st.num), serial: st.key.serial, lu: st.lu})
	}
	slices.SortFunc(v.luns, func(a, b lunMetrics) int {
		na, _ := strconv.Atoi(a.lun)
		nb, _ := strconv.Atoi(b.lun)
		return na - nb
	})
	return v
}

const metricsNamespace = "srptarget"

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(metricsNamespace+"_"+name, help, labels, nil)
}

// Per-LUN metric descriptions.
var (
	lunLabels = []string{"lun", "serial"}

	descLUNCommands = newDesc("lun_commands_total",
		"SCSI commands answered, by operation class (read: READ; write: WRITE, WRITE AND VERIFY; other: the rest).",
		"lun", "serial", "op")
	descLUNLatency = newDesc("lun_command_duration_seconds",
		"Time from the arrival of the SRP_CMD to the posting of its SRP_RSP, by operation class.",
		"lun", "serial", "op")
	descLUNReadBytes = newDesc("lun_read_bytes_total",
		"Data-in bytes sent to initiators (RDMA WRITE) by answered commands.", lunLabels...)
	descLUNWrittenBytes = newDesc("lun_written_bytes_total",
		"Data-out bytes received from initiators (RDMA READ or immediate data) by answered commands.", lunLabels...)
	descLUNErrors = newDesc("lun_errors_total",
		"CHECK CONDITION responses, by sense key (SPC-4 name).", "lun", "serial", "sense_key")
	descLUNInFlight = newDesc("lun_commands_in_flight",
		"Commands that arrived and have not ended (holding the logical unit until their response is posted).", lunLabels...)
)

// Per-target metric descriptions.
var (
	descLoginsAccepted = newDesc("logins_accepted_total", "SRP logins accepted.")
	descLoginsRejected = newDesc("logins_rejected_total",
		"SRP logins refused (SRP_LOGIN_REJ), by reason (include/scsi/srp.h SRP_LOGIN_REJ_*, lower case; acl: refused by the ACLs).", "reason")
	descSessions        = newDesc("sessions", "I_T nexuses with at least one channel.")
	descChannels        = newDesc("channels", "Open RDMA channels.")
	descChannelsClosed  = newDesc("channels_closed_total", "RDMA channels closed.")
	descCommands        = newDesc("commands_total", "SRP_CMD IUs received, every LUN included.")
	descAborted         = newDesc("commands_aborted_total", "Commands ended without a response (task management, nexus loss).")
	descTaskMgmt        = newDesc("task_management_total", "SRP_TSK_MGMT IUs received, by function (SAM name; \"other\": undefined or malformed).", "function")
	descDataInBytes     = newDesc("data_in_bytes_total", "Data-in bytes sent to initiators, every LUN included.")
	descDataOutBytes    = newDesc("data_out_bytes_total", "Data-out bytes received from initiators, every LUN included.")
	descTransportErrors = newDesc("transport_errors_total", "Commands refused by the SRP transport itself (malformed SRP_CMD, limits).")
	descProtocolErrors  = newDesc("protocol_errors_total", "Channels closed for a protocol violation.")
	descRDMAErrors      = newDesc("rdma_errors_total", "Failed RDMA work requests (flushes excluded).")
	descRDMAStalls      = newDesc("rdma_stalls_total", "Channels closed because a work request stayed outstanding for limits.rdma_timeout (the initiator stopped taking responses, or takes them too slowly).")
	descIdleClosed      = newDesc("channels_idle_closed_total", "Channels closed because they received and held nothing for limits.idle_timeout.")
	descBufferWaits     = newDesc("buffer_waits_total", "Commands that waited for a data buffer.")
	descBusy            = newDesc("busy_total", "Commands answered BUSY after waiting limits.buffer_wait for a data buffer.")
	descPoolInUse       = newDesc("buffer_pool_in_use_bytes", "Data buffer bytes in use, summed over RDMA devices.")
	descPoolHighMark    = newDesc("buffer_pool_high_water_bytes", "Most data buffer bytes ever in use at once, summed over RDMA devices.")
	descPoolSize        = newDesc("buffer_pool_size_bytes", "Size of the registered data buffer pools, summed over RDMA devices.")
	descCreditRequests  = newDesc("credit_requests_total", "SRP_CRED_REQ IUs sent to return credits of aborted commands.")
	descBuildInfo       = newDesc("build_info", "Always 1; the labels say what the daemon's binary is (srptarget version).",
		"version", "release", "commit", "modified", "goversion", "backstores")
	initiatorLabelNames = []string{"acl", "initiator", "lun"}

	descInitiatorCommands = newDesc("initiator_commands_total",
		"Commands answered, per ACL (acl: its name or acls[N]), initiator (with per_initiator_metrics; \"\" otherwise) and LUN.", initiatorLabelNames...)
	descInitiatorReadBytes = newDesc("initiator_read_bytes_total",
		"Data-in bytes sent to the initiators, per ACL, initiator and LUN.", initiatorLabelNames...)
	descInitiatorWrittenBytes = newDesc("initiator_written_bytes_total",
		"Data-out bytes received from the initiators, per ACL, initiator and LUN.", initiatorLabelNames...)
	descInitiatorErrors = newDesc("initiator_errors_total",
		"CHECK CONDITION responses, per ACL, initiator and LUN.", initiatorLabelNames...)
	descInitiatorLastActive = newDesc("initiator_last_active_timestamp_seconds",
		"When the initiators of the series last had a command answered (Unix time, to within rdma_timeout/8).", "acl", "initiator")

	descServing = newDesc("serving", "1 when the daemon serves; 0 while serve waits for an RDMA device (it started before the device) and nothing else is known yet.")
)

// loginRejectReasons are the label values of Stats.Rejects, in its order (SRP r16a table 14).
var loginRejectReasons = [len(srp.Stats{}.Rejects)]string{
	"unable_establish_channel",
	"insufficient_resources",
	"req_it_iu_length_too_large",
	"unable_associate_channel",
	"unsupported_descriptor_fmt",
	"multi_channel_unsupported",
	"channel_limit_reached",
}

// exportedSenseKeys are the sense keys always exported, 0 included, so that a rate over them
// has a series from the start: those SPC-4 names (table 28), the reserved 0xC excepted.
var exportedSenseKeys = []scsi.SenseKey{
	0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xA, 0xB, 0xD, 0xE, 0xF,
}

// latencyBoundsSeconds are scsi.LatencyBounds in seconds.
var latencyBoundsSeconds = func() []float64 {
	out := make([]float64, len(scsi.LatencyBounds))
	for i, ns := range scsi.LatencyBounds {
		out[i] = time.Duration(ns).Seconds()
	}
	return out
}()

// daemonCollector is the prometheus.Collector of the daemon's metrics.
type daemonCollector struct {
	build control.BuildInfo // srptarget_build_info
	view  atomic.Pointer[metricsView]
}

// set publishes what the next scrape reads.
func (c *daemonCollector) set(v *metricsView) { c.view.Store(v) }

// Describe sends every description Collect may use.
func (c *daemonCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descLUNCommands, descLUNLatency, descLUNReadBytes, descLUNWrittenBytes, descLUNErrors, descLUNInFlight,
		descLoginsAccepted, descLoginsRejected, descSessions, descChannels, descChannelsClosed, descCommands,
		descAborted, descTaskMgmt, descDataInBytes, descDataOutBytes, descTransportErrors, descProtocolErrors,
		descRDMAErrors, descRDMAStalls, descIdleClosed, descBufferWaits, descBusy, descPoolInUse, descPoolHighMark, descPoolSize,
		descCreditRequests, descServing, descBuildInfo,
		descInitiatorCommands, descInitiatorReadBytes, descInitiatorWrittenBytes, descInitiatorErrors, descInitiatorLastActive,
	} {
		ch <- d
	}
}

// Collect reads the counters. Before the daemon has started it sends nothing.
func (c *daemonCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, c.build.Version, c.build.Release, c.build.Commit,
		strconv.FormatBool(c.build.Modified), c.build.GoVersion, strings.Join(c.build.Backstores, ","))
	v := c.view.Load()
	if v == nil {
		ch <- prometheus.MustNewConstMetric(descServing, prometheus.GaugeValue, 0)
		return
	}
	serving := 1.0
	if v.serving != nil && !v.serving() {
		serving = 0
	}
	ch <- prometheus.MustNewConstMetric(descServing, prometheus.GaugeValue, serving)
	if v.target != nil {
		collectTarget(ch, v.target)
	}
	for i := range v.luns {
		collectLUN(ch, &v.luns[i])
	}
	if v.initiators != nil {
		collectInitiators(ch, v.initiators())
	}
}

// collectInitiators exports the per-initiator series, and per acl and initiator the latest
// activity.
func collectInitiators(ch chan<- prometheus.Metric, sums map[ioKey]srp.IOStats) {
	type who struct{ acl, initiator string }
	last := map[who]time.Time{}
	for k, s := range sums {
		lun := strconv.Itoa(int(k.lun))
		counter(ch, descInitiatorCommands, s.Commands, k.acl, k.initiator, lun)
		counter(ch, descInitiatorReadBytes, s.ReadBytes, k.acl, k.initiator, lun)
		counter(ch, descInitiatorWrittenBytes, s.WrittenBytes, k.acl, k.initiator, lun)
		counter(ch, descInitiatorErrors, s.Errors, k.acl, k.initiator, lun)
		w := who{k.acl, k.initiator}
		if s.LastActive.After(last[w]) {
			last[w] = s.LastActive
		}
	}
	for w, t := range last {
		ch <- prometheus.MustNewConstMetric(descInitiatorLastActive, prometheus.GaugeValue, float64(t.UnixNano())/1e9, w.acl, w.initiator)
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v int64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
}

func collectTarget(ch chan<- prometheus.Metric, t *srp.Target) {
	s := t.Stats()
	counter(ch, descLoginsAccepted, s.LoginsAccepted)
	for i, reason := range loginRejectReasons {
		counter(ch, descLoginsRejected, s.Rejects[i], reason)
	}
	counter(ch, descLoginsRejected, s.RejectedByACL, "acl")
	gauge(ch, descSessions, int64(len(t.Sessions())))
	gauge(ch, descChannels, s.ChannelsOpen)
	counter(ch, descChannelsClosed, s.ChannelsClosed)
	counter(ch, descCommands, s.Commands)
	counter(ch, descAborted, s.Aborted)
	for i, fn := range srp.TaskMgmtFuncs {
		counter(ch, descTaskMgmt, s.TaskMgmtByFunc[i], fn.String())
	}
	counter(ch, descTaskMgmt, s.TaskMgmtByFunc[len(srp.TaskMgmtFuncs)], "other")
	counter(ch, descDataInBytes, s.BytesIn)
	counter(ch, descDataOutBytes, s.BytesOut)
	counter(ch, descTransportErrors, s.TransportErrors)
	counter(ch, descProtocolErrors, s.ProtocolErrors)
	counter(ch, descRDMAErrors, s.RDMAErrors)
	counter(ch, descRDMAStalls, s.RDMAStalls)
	counter(ch, descIdleClosed, s.IdleClosed)
	counter(ch, descBufferWaits, s.BufferWaits)
	counter(ch, descBusy, s.BufferBusy)
	gauge(ch, descPoolInUse, s.PoolInUse)
	gauge(ch, descPoolHighMark, s.PoolHighMark)
	gauge(ch, descPoolSize, s.PoolSize)
	counter(ch, descCreditRequests, s.CreditRequests)
}

func collectLUN(ch chan<- prometheus.Metric, l *lunMetrics) {
	s := l.lu.StatsSnapshot()
	for class := range scsi.NumOpClasses {
		op := class.String()
		counter(ch, descLUNCommands, s.Commands[class], l.lun, l.serial, op)
		h := &s.Latency[class]
		buckets := make(map[float64]uint64, len(latencyBoundsSeconds))
		for i, le := range latencyBoundsSeconds {
			buckets[le] = h.Buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(descLUNLatency, h.Count, time.Duration(h.SumNanos).Seconds(), buckets,
			l.lun, l.serial, op)
	}
	counter(ch, descLUNReadBytes, s.BytesIn, l.lun, l.serial)
	counter(ch, descLUNWrittenBytes, s.BytesOut, l.lun, l.serial)
	for _, k := range exportedSenseKeys {
		counter(ch, descLUNErrors, s.SenseKeys[k], l.lun, l.serial, k.String())
	}
	gauge(ch, descLUNInFlight, s.InFlight, l.lun, l.serial)
}

// metricsServer is the HTTP endpoint of `serve --metrics ADDR`: /metrics only, on a
// ServeMux of its own, from a registry of its own (the daemon's collector, and the Go runtime
// and process collectors every Go exporter has).
type metricsServer struct {
	*httpEndpoint
	collector *daemonCollector
}

// metricsLimits are the bounds of the metrics endpoint. A scrape is one small request and an
// answer of some kilobytes, which promhttp gives up on after 10 s; Prometheus keeps its
// connection alive between scrapes, every 15 s to a minute.
var metricsLimits = endpointLimits(30*time.Second, 32)

// startMetrics listens on addr and serves /metrics, of the binary build, until close. The collector reports
// nothing until the daemon publishes its view (daemonCollector.set). Metrics tell whoever
// reaches the port which LUNs exist, how busy they are and how many initiators are logged
// in, hence the warning unless addr is a loopback address.
func startMetrics(addr string, lim accept.HTTPLimits, build control.BuildInfo, log *zap.Logger) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	dc := &daemonCollector{build: build}
	if err := reg.Register(dc); err != nil {
		return nil, fmt.Errorf("--metrics: registering the collector: %w", err)
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("--metrics: registering the Go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("--metrics: registering the process collector: %w", err)
	}
	mlog := log.Named("metrics")
	ln, err := lim.Listen(addr, "metrics", mlog)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      zap.NewStdLog(mlog),
		ErrorHandling: promhttp.ContinueOnError,
		// A scrape that stalls must not pile up: Prometheus times out after 10 s by default.
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	e := serveEndpoint("metrics", addr, "/metrics",
		"the metrics endpoint is not bound to localhost: whoever reaches it sees the LUNs, their load and the sessions",
		ln, mux, lim, log)
	return &metricsServer{httpEndpoint: e, collector: dc}, nil
}
