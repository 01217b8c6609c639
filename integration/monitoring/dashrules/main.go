// Command dashrules prints the PromQL queries of a Grafana dashboard as a Prometheus rule
// file, one recording rule per query, so that `promtool check rules` parses every query the
// dashboard runs (integration/monitoring/check.sh). Grafana's variables are replaced by
// what they stand for at run time: $__rate_interval and the other intervals by a duration,
// the dashboard's own variables by a regular expression that matches anything.
//
//	go run ./integration/monitoring/dashrules configs/monitoring/srptarget-dashboard.json >rules.yml
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
)

type dashboard struct {
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int `json:"id"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

type rule struct {
	Record string `json:"record"`
	Expr   string `json:"expr"`
}

type group struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

var (
	interval = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)
	variable = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`)
	// labelValues is Grafana's label_values(series, label): the series is the query.
	labelValues = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)
)

func promql(expr string) string {
	expr = interval.ReplaceAllString(expr, "5m")
	return variable.ReplaceAllString(expr, ".*")
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dashrules DASHBOARD.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashrules:", err)
		os.Exit(1)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		fmt.Fprintf(os.Stderr, "dashrules: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	g := group{Name: "dashboard"}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			fmt.Fprintf(os.Stderr, "dashrules: variable %s: %v\n", v.Name, err)
			os.Exit(1)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			fmt.Fprintf(os.Stderr, "dashrules: variable %s: %q is not label_values(series, label)\n", v.Name, q.Query)
			os.Exit(1)
		}
		g.Rules = append(g.Rules, rule{Record: "dashboard:variable_" + v.Name, Expr: promql(m[1])})
	}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			g.Rules = append(g.Rules, rule{Record: fmt.Sprintf("dashboard:panel_%d_%s", p.ID, t.RefID), Expr: promql(t.Expr)})
		}
	}
	// JSON is YAML: promtool reads it as a rule file.
	out, err := json.MarshalIndent(map[string][]group{"groups": {g}}, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashrules:", err)
		os.Exit(1)
	}
	fmt.Printf("%s\n", out)
}
