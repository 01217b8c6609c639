package checks

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The daemon's answers on its control socket, as `srptarget COMMAND --json` prints them
// ({"version", "ok", "result"}): the fields the checks read, under the names the daemon gives
// them (internal/daemon/control_info.go).

// Status is `srptarget status`.
type Status struct {
	State     string     `json:"state"`
	PID       int        `json:"pid"`
	IDExt     string     `json:"id_ext"`
	Listeners []Listener `json:"listeners"`
	Sessions  int        `json:"sessions"`
	Channels  int        `json:"channels"`
	// BackstoreIO is how file and block LUNs are read and written (io_uring or sync), and
	// BackstoreIONote why sync, when it is.
	BackstoreIO     string `json:"backstore_io"`
	BackstoreIONote string `json:"backstore_io_note"`
}

// The states srptarget status reports that the checks compare with (the daemon's words;
// integration/logpins_test.go holds them to its source, as the log messages).
const (
	// StateWaitingDevice is the daemon's state while serve waits for an RDMA device (or its
	// start failed when one appeared).
	StateWaitingDevice = "waiting for an RDMA device"
	// ListenerWaitingAddress is a listener's state while no RDMA device has its address.
	ListenerWaitingAddress = "waiting for an RDMA device with this address"
)

// States are the status words the checks compare with, for integration/logpins_test.go.
var States = []string{StateWaitingDevice, ListenerWaitingAddress}

// Listener is one listener of `srptarget status`: its address (IP:port) and state
// ("listening", "failed", or why it waits).
type Listener struct {
	Address string `json:"address"`
	State   string `json:"state"`
}

// Session is one initiator of `srptarget sessions`.
type Session struct {
	Initiator string   `json:"initiator"`
	Sources   []string `json:"sources"`
	Channels  []struct {
		Source string `json:"source"`
		QPNum  uint32 `json:"qp_num"`
	} `json:"channels"`
}

// LUN is one logical unit of `srptarget luns`.
type LUN struct {
	LUN       int    `json:"lun"`
	Backstore string `json:"backstore"`
	Size      uint64 `json:"size"`
	BlockSize uint32 `json:"block_size"`
	Serial    string `json:"serial"`
	// Reservations are its persistent reservations, nil when no initiator registered.
	Reservations *struct {
		Generation    uint32 `json:"generation"`
		Type          uint8  `json:"type"`
		Registrations []struct {
			Key       string `json:"key"`
			Initiator string `json:"initiator"`
			Holder    bool   `json:"holder"`
		} `json:"registrations"`
	} `json:"persistent_reservations"`
}

// Reload is the outcome of `srptarget reload`.
type Reload struct {
	DryRun           bool     `json:"dry_run"`
	Applied          bool     `json:"applied"`
	Errors           []string `json:"errors"`
	Warnings         []string `json:"warnings"`
	LUNsAdded        []int    `json:"luns_added"`
	ListenersAdded   []string `json:"listeners_added"`
	ListenersRemoved []string `json:"listeners_removed"`
}

// Stats are the counters of `srptarget stats`, by name.
type Stats map[string]int64

// Get is a counter's value; an error when the daemon has no counter of that name (renamed or
// removed: a check must not read that as 0).
func (s Stats) Get(name string) (int64, error) {
	v, ok := s[name]
	if !ok {
		return 0, fmt.Errorf("srptarget stats has no counter %q", name)
	}
	return v, nil
}

// Ask runs `srptarget COMMAND ARGS... --json` against the daemon's control socket and decodes
// the result into v; the exit status is returned too (reload exits 1 when refused, with its
// errors in the result).
func (d *Daemon) Ask(v any, command string, args ...string) (int, error) {
	args = append([]string{command, "--json"}, args...)
	if d.Control != "" {
		args = append(args, "--control", d.Control)
	}
	cmd := exec.Command(d.Bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if cmd.ProcessState == nil {
		return -1, fmt.Errorf("srptarget %s: %w", command, err)
	}
	code := cmd.ProcessState.ExitCode()
	var answer struct {
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(out, &answer); err != nil || answer.Result == nil {
		return code, fmt.Errorf("srptarget %s: exit %d: %s", command, code, strings.TrimSpace(string(out)+" "+stderr.String()))
	}
	if err := json.Unmarshal(answer.Result, v); err != nil {
		return code, fmt.Errorf("srptarget %s: %w", command, err)
	}
	return code, nil
}

// Status asks `srptarget status`.
func (d *Daemon) Status() (Status, error) {
	var s Status
	_, err := d.Ask(&s, "status")
	return s, err
}

// Sessions asks `srptarget sessions`.
func (d *Daemon) Sessions() ([]Session, error) {
	var s []Session
	_, err := d.Ask(&s, "sessions")
	return s, err
}

// LUNs asks `srptarget luns`.
func (d *Daemon) LUNs() ([]LUN, error) {
	var l []LUN
	_, err := d.Ask(&l, "luns")
	return l, err
}

// Stats asks `srptarget stats`.
func (d *Daemon) Stats() (Stats, error) {
	var es []struct {
		Name  string `json:"name"`
		Value int64  `json:"value"`
	}
	if _, err := d.Ask(&es, "stats"); err != nil {
		return nil, err
	}
	s := Stats{}
	for _, e := range es {
		s[e.Name] = e.Value
	}
	return s, nil
}

// Stat is one counter of Stats.
func (d *Daemon) Stat(name string) (int64, error) {
	s, err := d.Stats()
	if err != nil {
		return 0, err
	}
	return s.Get(name)
}

// WaitChannels waits up to d for the daemon to have no channel open (srptarget stats): after a
// logout, the initiator has disconnected them all.
func (d *Daemon) WaitChannels(timeout time.Duration) error {
	var n int64
	var err error
	if WaitFor(timeout, func() bool { n, err = d.Stat("channels_open"); return err == nil && n == 0 }) {
		return nil
	}
	return fmt.Errorf("%d channels still open %v after the logout (srptarget stats)%s", n, timeout, problem(fmt.Sprint(err)))
}

// Reload asks `srptarget reload` (--dry-run with dry); its exit status is in code.
func (d *Daemon) Reload(dry bool) (r Reload, code int, err error) {
	var args []string
	if dry {
		args = append(args, "--dry-run")
	}
	code, err = d.Ask(&r, "reload", args...)
	return r, code, err
}

// Metrics reads the daemon's Prometheus endpoint (serve --metrics ADDR).
func Metrics(addr string) (map[string]*dto.MetricFamily, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return nil, fmt.Errorf("GET /metrics: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// MetricSum is the sum of the samples of family name whose labels include every one of want
// (counters, gauges, and the sample count of histograms); an error when the family is absent.
func MetricSum(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, error) {
	f, ok := fams[name]
	if !ok {
		return 0, fmt.Errorf("/metrics has no %s", name)
	}
	var sum float64
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, nil
}
