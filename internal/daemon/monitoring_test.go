package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/srptarget/srptarget/srp"
)

// The Grafana dashboard and the Prometheus alerting rules of configs/monitoring are checked
// against what the daemon exports: every series and label they name must be one /metrics
// gives, so that a renamed metric cannot leave a panel empty or an alert silent. Their PromQL
// syntax and the alerts' behaviour are checked by promtool (make monitoring-test).

const (
	dashboardFile = "../../configs/monitoring/srptarget-dashboard.json"
	alertsFile    = "../../configs/monitoring/srptarget-alerts.yml"
)

// exportedSeries gathers what /metrics serves for a running daemon with one LUN: the daemon's
// collector and the Go and process collectors, as startMetrics registers them. It maps each
// series name a query can use (a histogram's _bucket, _sum and _count) to its label names,
// the target labels every scrape adds (job, instance) included.
func exportedSeries(t *testing.T) map[string][]string {
	t.Helper()
	lu, tgt := collectedLU(t, "mon0")
	dc := &daemonCollector{}
	dc.set(newMetricsView(tgt, map[int]*lunState{0: {num: 0, key: luKey{serial: "mon0"}, lu: lu}}, nil,
		func() map[ioKey]srp.IOStats {
			return map[ioKey]srp.IOStats{{acl: "db-hosts", initiator: "", lun: 0}: {Commands: 1, LastActive: time.Now()}}
		}))

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(dc))
	require.NoError(t, reg.Register(collectors.NewGoCollector()))
	require.NoError(t, reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})))
	fams, err := reg.Gather()
	require.NoError(t, err)

	out := map[string][]string{"up": {"job", "instance"}}
	for _, f := range fams {
		labels := []string{"job", "instance"}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !slices.Contains(labels, lp.GetName()) {
					labels = append(labels, lp.GetName())
				}
			}
		}
		if f.GetType() == dto.MetricType_HISTOGRAM {
			out[f.GetName()+"_bucket"] = append(slices.Clone(labels), "le")
			out[f.GetName()+"_sum"] = labels
			out[f.GetName()+"_count"] = labels
			continue
		}
		out[f.GetName()] = labels
	}
	return out
}

var (
	// seriesName finds the metric names in a query: srptarget_*, and the Go client's go_* and
	// process_* (up is checked on its own).
	seriesName = regexp.MustCompile(`\b(?:srptarget|go|process)_[a-zA-Z0-9_]+\b|\bup\b`)
	// byClause and matcher find the label names a query groups by or matches.
	byClause = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"`)
	// templateVar finds Grafana's variables ($lun, ${lun}, $__rate_interval).
	templateVar = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)\}?`)
)

// checkQuery requires that every series and label query names is exported, and returns the
// series it names.
func checkQuery(t testingT, series map[string][]string, where, query string) []string {
	t.Helper()
	// Label values in quotes are not names ("MEDIUM ERROR|HARDWARE ERROR", "srptarget").
	unquoted := regexp.MustCompile(`"[^"]*"`).ReplaceAllString(query, `""`)
	names := seriesName.FindAllString(unquoted, -1)
	require.NotEmpty(t, names, "%s: %q names no series", where, query)
	var labels []string
	for _, n := range names {
		l, ok := series[n]
		require.True(t, ok, "%s: %s is not a series the daemon exports (%q)", where, n, query)
		labels = append(labels, l...)
	}
	for _, m := range byClause.FindAllStringSubmatch(unquoted, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				require.Contains(t, labels, l, "%s: grouping by %s, a label none of %v has (%q)", where, l, names, query)
			}
		}
	}
	for _, m := range matcher.FindAllStringSubmatch(query, -1) {
		require.Contains(t, labels, m[1], "%s: matching on %s, a label none of %v has (%q)", where, m[1], names, query)
	}
	return names
}

// testingT is what checkQuery needs of a *testing.T, so that its control can give it a fake.
type testingT interface {
	require.TestingT
	Helper()
}

// fakeT records a failure and stops the check with a panic (testing.T stops the goroutine).
type fakeT struct{ failed bool }

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) FailNow()              { f.failed = true; panic(f) }
func (f *fakeT) Helper()               {}

// grafanaDashboard is the part of Grafana's dashboard JSON model the test reads.
type grafanaDashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *grafanaDS      `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaDS struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type grafanaPanel struct {
	ID          int        `json:"id"`
	Type        string     `json:"type"`
	Title       string     `json:"title"`
	Description string     `json:"description"`
	Datasource  *grafanaDS `json:"datasource"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string     `json:"refId"`
		Expr       string     `json:"expr"`
		Datasource *grafanaDS `json:"datasource"`
	} `json:"targets"`
}

// TestGrafanaDashboard checks configs/monitoring/srptarget-dashboard.json: panels that do not
// overlap on Grafana's 24-column grid, every query on the dashboard's data source variable and
// on the series and labels the daemon exports, only the dashboard's own variables, and every
// srptarget_* series the daemon exports shown by some panel.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d grafanaDashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	require.NoError(t, dec.Decode(&d))
	require.Equal(t, "srptarget", d.UID)
	series := exportedSeries(t)

	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		require.Equal(t, &grafanaDS{Type: "prometheus", UID: "${datasource}"}, v.Datasource, "variable %s", v.Name)
		var q struct{ Query string }
		require.NoError(t, json.Unmarshal(v.Query, &q), "variable %s", v.Name)
		checkQuery(t, series, "variable "+v.Name, q.Query)
	}
	require.True(t, vars["datasource"], "a data source variable, so that the dashboard imports into any Grafana")

	shown := map[string]bool{}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]int{}
	for _, p := range d.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		require.False(t, ids[p.ID], "%s: id used twice", where)
		ids[p.ID] = true
		require.NotEmpty(t, p.Title, where)
		require.True(t, p.GridPos.W > 0 && p.GridPos.H > 0 && p.GridPos.X >= 0 && p.GridPos.X+p.GridPos.W <= 24,
			"%s: gridPos %+v outside the 24 columns", where, p.GridPos)
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				other, ok := taken[cell{x, y}]
				require.False(t, ok, "%s overlaps panel %d at %d,%d", where, other, x, y)
				taken[cell{x, y}] = p.ID
			}
		}
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Description, "%s: say what the panel shows", where)
		require.Equal(t, &grafanaDS{Type: "prometheus", UID: "${datasource}"}, p.Datasource, where)
		require.NotEmpty(t, p.Targets, where)
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			require.False(t, refs[tg.RefID], "%s: refId %s twice", where, tg.RefID)
			refs[tg.RefID] = true
			require.Equal(t, p.Datasource, tg.Datasource, where)
			for _, m := range templateVar.FindAllStringSubmatch(tg.Expr, -1) {
				require.True(t, vars[m[1]], "%s: $%s is no variable of the dashboard", where, m[1])
			}
			for _, n := range checkQuery(t, series, where, tg.Expr) {
				shown[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
			}
		}
	}
	for n := range series {
		if strings.HasPrefix(n, "srptarget_") && !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count") {
			base := strings.TrimSuffix(n, "_bucket")
			require.True(t, shown[base], "no panel shows %s", base)
		}
	}
}

// TestAlertRules checks configs/monitoring/srptarget-alerts.yml: every rule names series and
// labels the daemon exports, has a severity of critical or warning, a summary and a
// description.
func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&f))
	series := exportedSeries(t)
	seen := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			require.False(t, seen[r.Alert], "alert %s twice", r.Alert)
			seen[r.Alert] = true
			checkQuery(t, series, "alert "+r.Alert, r.Expr)
			require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			require.NotEmpty(t, r.Annotations["description"], r.Alert)
		}
	}
	// What an operator must be told: the target down or serving nothing, stalls, BUSY,
	// refused logins, backstore errors by sense key.
	for _, a := range []string{"SrptargetDown", "SrptargetNotServing", "SrptargetRDMAStalls", "SrptargetBusy",
		"SrptargetLoginsRefused", "SrptargetBackstoreErrors", "SrptargetCommandsStuck"} {
		require.True(t, seen[a], "no alert %s", a)
	}
}

// TestCheckQueryCatchesMistakes is the check's own control: a misspelt series, a label the
// series lacks and a grouping by a missing label fail it.
func TestCheckQueryCatchesMistakes(t *testing.T) {
	series := exportedSeries(t)
	for _, q := range []string{
		`rate(srptarget_lun_command_total[5m])`,
		`srptarget_busy_total{lun="0"}`,
		`sum by (sensekey) (srptarget_lun_errors_total)`,
	} {
		ft := &fakeT{}
		func() {
			defer func() { _ = recover() }()
			checkQuery(ft, series, "control", q)
		}()
		require.True(t, ft.failed, "%q passed", q)
	}
	checkQuery(t, series, "control", `sum by (instance, lun, sense_key) (rate(srptarget_lun_errors_total{sense_key="MEDIUM ERROR"}[5m]))`)
}
