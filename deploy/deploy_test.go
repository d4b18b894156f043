// SPDX-License-Identifier: Apache-2.0

// Package deploy holds the deployment files of stacktop serve (systemd unit,
// Kubernetes DaemonSet, Prometheus scrape configuration, Grafana dashboard);
// its tests check them against the tools and schemas that will consume them.
package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	grafana "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"go.yaml.in/yaml/v2"

	"github.com/stacktop/stacktop/internal/testenv"
)

// documentedMetrics returns the metric names of docs/METRICS.md's tables,
// with the series names a histogram adds.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (counter|gauge|histogram) \\|").FindAllStringSubmatch(string(doc), -1) {
		names[m[1]] = true
		if m[2] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[m[1]+s] = true
			}
		}
	}
	if len(names) < 20 {
		t.Fatalf("found only %d metrics in docs/METRICS.md", len(names))
	}
	return names
}

// Grafana's dashboard model, reduced to what a dashboard needs to load and
// show data: panel types, grid layout, data source references and targets.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Repeat     string     `json:"repeat"`
	GridPos    gridPos    `json:"gridPos"`
	Datasource *reference `json:"datasource"`
	Targets    []struct {
		RefID      string     `json:"refId"`
		Expr       string     `json:"expr"`
		Format     string     `json:"format"`
		Datasource *reference `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type gridPos struct{ X, Y, W, H int }

type reference struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/stacktop-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("dashboard is not valid JSON for Grafana's model: %v", err)
	}
	return d
}

// The dashboard loads in Grafana's own schema (the Go types Grafana
// generates from its CUE definitions, with every built-in panel's options and
// the Prometheus query type): no unknown field, no required field missing,
// every value of the declared type.
func TestDashboardMatchesGrafanaSchema(t *testing.T) {
	b, err := os.ReadFile("grafana/stacktop-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	plugins.RegisterDefaultPlugins()
	var d grafana.Dashboard
	// The SDK returns an empty error list as a non-nil error.
	if err := d.UnmarshalJSONStrict(b); err != nil && err.Error() != "" {
		t.Fatalf("Grafana's schema rejects the dashboard:\n%v", err)
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("Grafana's schema rejects the dashboard:\n%v", err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("no panels")
	}
}

// panelTypes are the panel plugins built into Grafana that the dashboard may use.
var panelTypes = []string{"row", "timeseries", "heatmap", "stat", "table", "gauge", "bargauge", "text"}

func TestDashboardStructure(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || len(d.UID) > 40 {
		t.Errorf("title %q, uid %q: both needed, uid at most 40 characters", d.Title, d.UID)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: panels with data source references need 36 or later", d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" {
		t.Errorf("no data source variable: templating has %v", vars)
	}
	ids := map[int]bool{}
	var heatmaps, repeated int
	var placed []panel
	for _, p := range d.Panels {
		if ids[p.ID] || p.ID <= 0 {
			t.Errorf("panel %q: id %d missing or used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if !slices.Contains(panelTypes, p.Type) {
			t.Errorf("panel %q: type %q is not a built-in panel", p.Title, p.Type)
		}
		g := p.GridPos
		if p.Title == "" || g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: needs a title and a position inside the 24-column grid, has %+v", p.Title, g)
		}
		for _, q := range placed {
			if overlap(p.GridPos, q.GridPos) {
				t.Errorf("panels %q and %q overlap", p.Title, q.Title)
			}
		}
		placed = append(placed, p)
		if p.Type == "row" {
			if len(p.Panels) != 0 || len(p.Targets) != 0 {
				t.Errorf("row %q: an expanded row holds neither panels nor queries", p.Title)
			}
			continue
		}
		if p.Repeat != "" && vars[p.Repeat] == "" {
			t.Errorf("panel %q repeats over undefined variable %q", p.Title, p.Repeat)
		}
		checkDatasource(t, p.Title, p.Datasource)
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q missing or used twice", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			checkDatasource(t, p.Title, tg.Datasource)
			if p.Type == "heatmap" && (tg.Format != "heatmap" || !strings.Contains(tg.Expr, "_bucket")) {
				t.Errorf("heatmap %q: query must read _bucket series with format heatmap", p.Title)
			}
		}
		if p.Type == "heatmap" && strings.Contains(p.Targets[0].Expr, "netstack_latency_seconds_bucket") {
			heatmaps++
			if p.Repeat == "hook" {
				repeated++
			}
		}
	}
	if heatmaps == 0 || repeated == 0 {
		t.Errorf("want a latency heatmap repeated per hook; have %d latency heatmaps, %d repeated by hook", heatmaps, repeated)
	}
}

func overlap(a, b gridPos) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

func checkDatasource(t *testing.T, title string, r *reference) {
	t.Helper()
	if r == nil || r.Type != "prometheus" || r.UID != "${datasource}" {
		t.Errorf("panel %q: data source %+v, want the Prometheus ${datasource} variable", title, r)
	}
}

// DashboardQueries returns every PromQL expression of the dashboard (panel
// targets and variable queries) with Grafana's variables replaced by values
// Prometheus accepts, keyed by where it appears.
func dashboardQueries(t *testing.T) map[string]string {
	d := loadDashboard(t)
	grafanaVars := strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$instance", ".+", "$hook", ".+")
	out := map[string]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out[fmt.Sprintf("panel %q %s", p.Title, tg.RefID)] = grafanaVars.Replace(tg.Expr)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			m := labelValues.FindStringSubmatch(fmt.Sprint(q["query"]))
			if m == nil {
				t.Fatalf("variable %s: query %v is not label_values(selector, label)", v.Name, q["query"])
			}
			out["variable "+v.Name] = grafanaVars.Replace(m[1])
		}
	}
	return out
}

// Every query parses as PromQL (promtool checks them as recording rules)
// and reads only metrics that stacktop serve exports.
func TestDashboardQueries(t *testing.T) {
	promtool := testenv.RequireTool(t, "promtool")
	known := documentedMetrics(t)
	metricName := regexp.MustCompile(`\b(?:netstack|stacktop)_[a-z0-9_]+\b`)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for where, expr := range dashboardQueries(t) {
		unquoted := regexp.MustCompile(`"[^"]*"`).ReplaceAllString(expr, `""`)
		for _, name := range metricName.FindAllString(unquoted, -1) {
			if !known[name] {
				t.Errorf("%s reads %s, which stacktop does not export", where, name)
			}
		}
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query%d", len(rules)), Expr: expr})
	}
	file := map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}}
	b, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}

func TestPrometheusScrapeConfig(t *testing.T) {
	promtool := testenv.RequireTool(t, "promtool")
	if out, err := exec.Command(promtool, "check", "config", "prometheus/stacktop.yml").CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
	// Debian's Prometheus is built without Kubernetes discovery, so the
	// Kubernetes job is checked for the fields that tie it to the DaemonSet.
	b, err := os.ReadFile("prometheus/scrape-kubernetes.yml")
	if err != nil {
		t.Fatal(err)
	}
	type relabel struct {
		Regex  string `yaml:"regex"`
		Action string `yaml:"action"`
	}
	var jobs []struct {
		JobName string `yaml:"job_name"`
		SD      []struct {
			Role string `yaml:"role"`
		} `yaml:"kubernetes_sd_configs"`
		Relabel []relabel `yaml:"relabel_configs"`
	}
	if err := yaml.Unmarshal(b, &jobs); err != nil {
		t.Fatal(err)
	}
	keepsMetricsPort := func(r relabel) bool { return r.Action == "keep" && r.Regex == "metrics" }
	if len(jobs) != 1 || len(jobs[0].SD) != 1 || jobs[0].SD[0].Role != "pod" ||
		!slices.ContainsFunc(jobs[0].Relabel, keepsMetricsPort) {
		t.Errorf("kubernetes job must discover pods and keep the port named metrics: %+v", jobs)
	}
}

func TestSystemdUnit(t *testing.T) {
	analyze := testenv.RequireTool(t, "systemd-analyze")
	unit, err := os.ReadFile("systemd/stacktop.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ExecStart=/usr/local/bin/stacktop serve ",
		"AmbientCapabilities=CAP_BPF CAP_PERFMON CAP_NET_ADMIN CAP_SYS_RESOURCE\n",
		"CapabilityBoundingSet=CAP_BPF CAP_PERFMON CAP_NET_ADMIN CAP_SYS_RESOURCE\n",
		"DynamicUser=yes\n",
		"NoNewPrivileges=yes\n",
	} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	// systemd-analyze insists that the binary exists; the verification is
	// about every other line, so point ExecStart at one that does.
	dir := t.TempDir()
	verifiable := strings.Replace(string(unit), "/usr/local/bin/stacktop", "/bin/true", 1)
	if err := os.WriteFile(filepath.Join(dir, "stacktop.service"), []byte(verifiable), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", filepath.Join(dir, "stacktop.service")).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func TestDaemonSet(t *testing.T) {
	f, err := os.Open("kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
	}
	var ds struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Metadata struct {
					Annotations map[string]string `yaml:"annotations"`
				} `yaml:"metadata"`
				Spec struct {
					HostNetwork bool `yaml:"hostNetwork"`
					HostPID     bool `yaml:"hostPID"`
					Containers  []struct {
						Args  []string `yaml:"args"`
						Ports []struct {
							Name          string `yaml:"name"`
							ContainerPort int    `yaml:"containerPort"`
						} `yaml:"ports"`
						SecurityContext struct {
							Privileged   bool `yaml:"privileged"`
							Capabilities struct {
								Add  []string `yaml:"add"`
								Drop []string `yaml:"drop"`
							} `yaml:"capabilities"`
						} `yaml:"securityContext"`
						Liveness     *probe `yaml:"livenessProbe"`
						Readiness    *probe `yaml:"readinessProbe"`
						VolumeMounts []struct {
							Name      string `yaml:"name"`
							MountPath string `yaml:"mountPath"`
							ReadOnly  bool   `yaml:"readOnly"`
						} `yaml:"volumeMounts"`
					} `yaml:"containers"`
					Volumes []struct {
						Name     string `yaml:"name"`
						HostPath struct {
							Path string `yaml:"path"`
						} `yaml:"hostPath"`
					} `yaml:"volumes"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	dec := yaml.NewDecoder(f)
	for ds.Kind != "DaemonSet" {
		if err := dec.Decode(&ds); err != nil {
			t.Fatalf("no DaemonSet in the manifest: %v", err)
		}
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || !pod.HostPID || len(pod.Containers) != 1 {
		t.Fatalf("want hostNetwork, hostPID and one container: %+v", pod)
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	for _, capability := range []string{"BPF", "PERFMON", "NET_ADMIN"} {
		if !slices.Contains(sc.Capabilities.Add, capability) {
			t.Errorf("capability %s not added: %v", capability, sc.Capabilities.Add)
		}
	}
	if sc.Privileged || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("want an unprivileged container that drops all other capabilities: %+v", sc)
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" || !slices.Contains(c.Args, "--web.listen-address=:9877") {
		t.Errorf("args %v: want serve listening on :9877", c.Args)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9877 || ds.Spec.Template.Metadata.Annotations["prometheus.io/port"] != "9877" {
		t.Errorf("port 9877 must be declared and annotated: %+v", c.Ports)
	}
	// The node's cgroups and the kubelet's log layout (pod names), read-only,
	// each at the node's own path.
	for _, path := range []string{"/sys/fs/cgroup", "/var/log/pods", "/var/log/containers"} {
		var mounted bool
		for _, m := range c.VolumeMounts {
			for _, v := range pod.Volumes {
				mounted = mounted || m.MountPath == path && m.ReadOnly && v.Name == m.Name && v.HostPath.Path == path
			}
		}
		if !mounted {
			t.Errorf("the node's %s is not mounted read-only at %s", path, path)
		}
	}
	for name, want := range map[string]struct {
		p    *probe
		path string
	}{"liveness": {c.Liveness, "/-/healthy"}, "readiness": {c.Readiness, "/-/ready"}} {
		if p := want.p; p == nil || p.HTTPGet.Port != c.Ports[0].Name || p.HTTPGet.Path != want.path {
			t.Errorf("%s probe must GET %s on the metrics port: %+v", name, want.path, p)
		}
	}
}
