package charts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/controllers"
)

const (
	// prometheusRuleAPI is what the PrometheusRule template asks the
	// cluster for.
	prometheusRuleAPI = "monitoring.coreos.com/v1/PrometheusRule"
	// alertTests are the promtool unit tests of the alerts.
	alertTests = "testdata/alerts.test.yaml"
	// dashboardFile is the Grafana dashboard the chart ships.
	dashboardFile = chartDir + "/files/dashboards/storybus.json"
	// operationsDoc holds the alerts' runbooks.
	operationsDoc = "../docs/operations.md"
)

// ruleGroup is a Prometheus rule group as the PrometheusRule holds it.
type ruleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Alert       string            `json:"alert"`
		Expr        string            `json:"expr"`
		For         string            `json:"for"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"rules"`
}

// renderedRules renders the chart's PrometheusRule with the given extra
// arguments and returns its rule groups.
func renderedRules(t *testing.T, args ...string) []ruleGroup {
	t.Helper()
	ms := splitManifests(t, render(t, append([]string{"--set", "prometheusRule.enabled=true", "--api-versions", prometheusRuleAPI}, args...)...))
	var pr struct {
		Spec struct {
			Groups []ruleGroup `json:"groups"`
		} `json:"spec"`
	}
	decode(t, find(t, ms, "PrometheusRule", releaseName), &pr)
	if len(pr.Spec.Groups) == 0 {
		t.Fatal("the PrometheusRule has no rule groups")
	}
	return pr.Spec.Groups
}

// promtool is the promtool binary: $PROMTOOL, or promtool on the PATH.
// Without it the test fails, on CI and elsewhere: a skipped rule test
// would let an untested alert pass for a tested one.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		where := "this machine"
		if os.Getenv("CI") == "true" {
			where = "CI (.ci/run installs it)"
		}
		t.Fatalf("the alert tests need promtool, missing on %s: install Debian's prometheus package (apt-get install prometheus) or set PROMTOOL to its path", where)
	}
	return p
}

// TestAlertRules renders the chart's PrometheusRule, has promtool check
// its rule groups and run testdata/alerts.test.yaml on them, and checks
// that those tests see every alert both fire and stay silent, and that
// every alert links a runbook section of docs/operations.md saying what
// the alert means, what to check and what to do.
func TestAlertRules(t *testing.T) {
	tool := promtool(t)
	groups := renderedRules(t)
	dir := t.TempDir()
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(alertTests)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts.test.yaml"}} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}

	var unit struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(tests, &unit); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range unit.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	doc, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	sections := markdownSections(string(doc))
	alerts := 0
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if !fires[r.Alert] || !silent[r.Alert] {
				t.Errorf("%s: %s has a test where it fires %v, and one where it does not %v; want both", alertTests, r.Alert, fires[r.Alert], silent[r.Alert])
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: no summary or description", r.Alert)
			}
			_, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "#")
			body, ok := sections[anchor]
			switch {
			case anchor != strings.ToLower(r.Alert):
				t.Errorf("%s: runbook_url %q does not end in #%s", r.Alert, r.Annotations["runbook_url"], strings.ToLower(r.Alert))
			case !ok:
				t.Errorf("%s: docs/operations.md has no section %q for its runbook_url", r.Alert, r.Alert)
			default:
				for _, part := range []string{"**Meaning.**", "**Check.**", "**Do.**"} {
					if !strings.Contains(body, part) {
						t.Errorf("docs/operations.md, %s: no %s paragraph", r.Alert, part)
					}
				}
			}
		}
	}
	if alerts < 8 {
		t.Errorf("the PrometheusRule has %d alerts, want the 8 of docs/operations.md", alerts)
	}
}

// markdownSections returns the text under each heading of a Markdown
// document, by the anchor GitHub gives the heading.
func markdownSections(doc string) map[string]string {
	out := map[string]string{}
	var anchor string
	var body strings.Builder
	flush := func() {
		if anchor != "" {
			out[anchor] = body.String()
		}
		body.Reset()
	}
	for line := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(line, "#") {
			flush()
			title := strings.TrimSpace(strings.TrimLeft(line, "#"))
			anchor = strings.ReplaceAll(strings.ToLower(regexp.MustCompile(`[^\w\- ]`).ReplaceAllString(title, "")), " ", "-")
			continue
		}
		body.WriteString(line + "\n")
	}
	flush()
	return out
}

// TestPrometheusRuleNeedsTheAPI: the PrometheusRule is off by default, and
// left out where the cluster does not serve the kind, where it would fail
// the install.
func TestPrometheusRuleNeedsTheAPI(t *testing.T) {
	noKind(t, splitManifests(t, render(t, "--api-versions", prometheusRuleAPI)), "PrometheusRule")
	noKind(t, splitManifests(t, render(t, "--set", "prometheusRule.enabled=true")), "PrometheusRule")
	groups := renderedRules(t, "--set", "prometheusRule.alertLabels.team=newsroom-platform",
		"--set", "prometheusRule.runbookBaseURL=https://runbooks.example/storybus")
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Labels["team"] != "newsroom-platform" {
				t.Errorf("%s: labels %v lack alertLabels", r.Alert, r.Labels)
			}
			if !strings.HasPrefix(r.Annotations["runbook_url"], "https://runbooks.example/storybus#") {
				t.Errorf("%s: runbook_url %q does not follow runbookBaseURL", r.Alert, r.Annotations["runbook_url"])
			}
		}
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) (dashboard, []byte) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d, b
}

// TestGrafanaDashboard: the dashboard parses, its panels have unique ids
// and query Prometheus through the dashboard's data source variable, it
// has the panels docs/operations.md lists, and the chart ships it
// unchanged in a ConfigMap with the sidecar's label only when asked.
func TestGrafanaDashboard(t *testing.T) {
	d, raw := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q", d.UID, d.Title)
	}
	ids := map[int]bool{}
	var titles []string
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		titles = append(titles, p.Title)
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not query the ${datasource} variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
		}
	}
	doc, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	panels := markdownSections(string(doc))["dashboard"]
	for _, title := range titles {
		if !strings.Contains(panels, "| "+title+" |") {
			t.Errorf("docs/operations.md, Dashboard, does not describe panel %q", title)
		}
	}

	noKind(t, splitManifests(t, render(t)), "ConfigMap")
	ms := splitManifests(t, render(t, "--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.namespace=grafana"))
	cm := find(t, ms, "ConfigMap", releaseName+"-dashboard")
	var got struct {
		Metadata struct {
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	decode(t, cm, &got)
	if got.Metadata.Namespace != "grafana" || got.Metadata.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap metadata %+v, want namespace grafana and label grafana_dashboard=1", got.Metadata)
	}
	if got.Data["storybus.json"] != strings.TrimRight(string(raw), "\n") {
		t.Error("the ConfigMap's storybus.json differs from files/dashboards/storybus.json")
	}
}

// TestMonitoringMetricsAreRegistered: every metric an alert or the
// dashboard queries is one the bus or the operator registers (or
// Prometheus's own up), so that a renamed metric cannot leave an alert
// silently watching nothing.
func TestMonitoringMetricsAreRegistered(t *testing.T) {
	registered := registeredMetrics(t)
	for _, want := range []string{"storybus_publish_requests_total", "storybus_consumer_pending_messages", "storybus_operator_tenants", "storybus_build_info"} {
		if !registered[want] {
			t.Fatalf("the registered metrics lack %s: the descriptors are not read right", want)
		}
	}
	check := func(where, expr string) {
		names := queriedMetrics(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric found in %q", where, expr)
		}
		for _, n := range names {
			if !registered[n] && !registered[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] && n != "up" {
				t.Errorf("%s queries %s, which neither the bus nor the operator registers", where, n)
			}
		}
	}
	for _, g := range renderedRules(t) {
		for _, r := range g.Rules {
			check("alert "+r.Alert, r.Expr)
		}
	}
	d, _ := readDashboard(t)
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			check("dashboard panel "+p.Title, q.Expr)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((\w+)`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("dashboard variable %s: %q is not label_values(metric…)", v.Name, v.Definition)
			continue
		}
		check("dashboard variable "+v.Name, m[1])
	}
}

// registeredMetrics are the names of the metrics the bus and the operator
// register, read from their descriptors.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		bus.NewMetrics().DescribeAll(ch)
		controllers.DescribeMetrics(ch)
		close(ch)
	}()
	// A descriptor says its name only in its String form.
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("descriptor %s has no fqName", d)
		}
		names[m[1]] = true
	}
	return names
}

var (
	// promqlStrings, promqlMatchers and promqlRanges are a query's string
	// literals, label matchers and range or subquery brackets.
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	// promqlGrouping is a label list after by, without, on, ignoring,
	// group_left or group_right.
	promqlGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// promqlIdent is an identifier, and whether a parenthesis follows it
	// (a function or an aggregation).
	promqlIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promqlKeywords = []string{"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
)

// queriedMetrics returns the metric names a PromQL query selects: the
// identifiers left once strings, label matchers, ranges and grouping
// labels are removed that are neither functions nor keywords. It is not a
// PromQL parser, only enough for the project's own queries, which the
// promtool run parses for real.
func queriedMetrics(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, `""`)
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRanges.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	names := map[string]bool{}
	for _, loc := range promqlIdent.FindAllStringSubmatchIndex(s, -1) {
		if loc[2] >= 0 {
			continue // a function or aggregation
		}
		if loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') {
			continue // a number's exponent or a duration's unit
		}
		id := s[loc[0]:loc[1]]
		if slices.Contains(promqlKeywords, id) {
			continue
		}
		names[id] = true
	}
	return slices.Sorted(maps.Keys(names))
}

// TestQueriedMetrics: the metric names are found in the shapes the
// project's queries take, and nothing else is taken for one.
func TestQueriedMetrics(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (namespace, workspace, rule) (rate(storybus_publish_requests_total{status=~"4..",rule!=""}[15m])) / ignoring (rule) group_left sum by (namespace, workspace) (rate(storybus_publish_requests_total[15m])) > 0.25`: "storybus_publish_requests_total",
		`histogram_quantile(0.99, sum by (op, le) (rate(storybus_store_operation_duration_seconds_bucket{namespace=~"$namespace"}[$__rate_interval])))`:                                                                           "storybus_store_operation_duration_seconds_bucket",
		`storybus_bus_ready{job="storybus-bus"} == 0 or up{job="storybus-bus"} == 0`:                                                                                                                                              "storybus_bus_ready up",
		`max by (namespace, pod) (storybus_tls_certificate_expiry_timestamp_seconds) - time() < 14 * 86400 and 1e3 > 2`:                                                                                                           "storybus_tls_certificate_expiry_timestamp_seconds",
	} {
		if got := strings.Join(queriedMetrics(expr), " "); got != want {
			t.Errorf("queriedMetrics(%s) = %q, want %q", expr, got, want)
		}
	}
	if got := fmt.Sprint(queriedMetrics(`sum(rate(x_total[5m]))`)); got != "[x_total]" {
		t.Errorf("got %s", got)
	}
}

// TestOperationsDocNamesEveryMetric: docs/operations.md, where on-call
// looks, names every storybus metric the bus and the operator register.
func TestOperationsDocNamesEveryMetric(t *testing.T) {
	doc, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	metrics := markdownSections(string(doc))["metrics"]
	for _, name := range slices.Sorted(maps.Keys(registeredMetrics(t))) {
		if strings.HasPrefix(name, "storybus_") && !strings.Contains(metrics, "`"+name+"`") {
			t.Errorf("docs/operations.md, Metrics, does not name %s", name)
		}
	}
}
