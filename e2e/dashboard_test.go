package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// dashboard is the part of a Grafana dashboard JSON file the tests read.
type dashboard struct {
	Inputs     []input `json:"__inputs"`
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

// input is an entry of a dashboard's __inputs: what Grafana's import
// dialog asks for, and substitutes for ${NAME} in the dashboard.
type input struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	PluginID string `json:"pluginId"`
}

// panel is a dashboard panel; a row holds its panels in Panels while it is
// collapsed, and has no targets.
type panel struct {
	ID         int            `json:"id"`
	Title      string         `json:"title"`
	Type       string         `json:"type"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []target       `json:"targets"`
	Panels     []panel        `json:"panels"`
}

type target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Hide       bool           `json:"hide"`
	Datasource *datasourceRef `json:"datasource"`
}

// variable is a template variable. Query is a string, or an object with
// a "query" string, depending on the Grafana version that saved it.
type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Datasource *datasourceRef  `json:"datasource"`
	Query      json.RawMessage `json:"query"`
	Current    json.RawMessage `json:"current"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// query is one PromQL query of a dashboard, as Grafana would send it.
type query struct {
	where string // file, panel and target, for messages
	expr  string // with the template variables still in it
	// label, for a template variable's query: the label whose values
	// the variable offers.
	label string
}

// dashboardFiles lists every dashboard JSON file under configs/grafana.
func dashboardFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(root, "configs", "grafana"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".json") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no dashboard JSON files under configs/grafana")
	}
	return files
}

func readDashboard(path string) (dashboard, error) {
	var d dashboard
	data, err := os.ReadFile(path)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return d, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// queriesOf returns every query of d: each visible target of each panel,
// rows' collapsed panels included, and each query variable's query.
func queriesOf(file string, d dashboard) ([]query, error) {
	var qs []query
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if !tg.Hide {
					qs = append(qs, query{where: fmt.Sprintf("%s: panel %q target %s", file, p.Title, tg.RefID), expr: tg.Expr})
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		expr, label, err := variableQuery(v)
		if err != nil {
			return nil, fmt.Errorf("%s: variable %q: %w", file, v.Name, err)
		}
		qs = append(qs, query{where: fmt.Sprintf("%s: variable %q", file, v.Name), expr: expr, label: label})
	}
	return qs, nil
}

var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)\s*$`)

// variableQuery turns a variable's label_values(SELECTOR, LABEL) into the
// PromQL query that finds the same values.
func variableQuery(v variable) (expr, label string, err error) {
	var s string
	if err := json.Unmarshal(v.Query, &s); err != nil {
		var obj struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &obj); err != nil {
			return "", "", fmt.Errorf("query is neither a string nor an object with a query: %s", v.Query)
		}
		s = obj.Query
	}
	m := labelValues.FindStringSubmatch(s)
	if m == nil {
		return "", "", fmt.Errorf("query %q: want label_values(SELECTOR, LABEL)", s)
	}
	return fmt.Sprintf("group by (%s) (%s)", m[2], m[1]), m[2], nil
}

// grafanaVar matches Grafana's variable syntaxes: $name, ${name},
// ${name:format} and [[name]].
var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// expand substitutes vars into expr as Grafana would, and fails on a
// variable it does not know.
func expand(expr string, vars map[string]string) (string, error) {
	var unknown []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(s string) string {
		m := grafanaVar.FindStringSubmatch(s)
		name := m[1] + m[2] + m[3]
		v, ok := vars[name]
		if !ok {
			unknown = append(unknown, name)
			return s
		}
		return v
	})
	if unknown != nil {
		return "", fmt.Errorf("unknown variables %q", unknown)
	}
	return out, nil
}

// testVars are the values the tests give the dashboards' variables: the
// bundled model, and a rate window a few times the tests' 1s scrape
// interval (as Grafana's $__rate_interval is) that still reaches back
// past the first scrape.
var testVars = map[string]string{
	"job":             jobName,
	"model":           "bytelm",
	"__rate_interval": "30s",
	"__interval":      "5s",
	"__range":         "30s",
}

// provisionedDatasources returns the uids of the Prometheus datasources
// provisioned in configs/grafana/provisioning/datasources, the default
// one first.
func provisionedDatasources(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "configs", "grafana", "provisioning", "datasources", "*.y*ml"))
	if err != nil {
		t.Fatal(err)
	}
	var uids []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Datasources []struct {
				UID       string `yaml:"uid"`
				Type      string `yaml:"type"`
				URL       string `yaml:"url"`
				IsDefault bool   `yaml:"isDefault"`
			} `yaml:"datasources"`
		}
		if err := yaml.Unmarshal(data, &p); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, ds := range p.Datasources {
			switch {
			case ds.Type != "prometheus" || ds.UID == "":
			case ds.IsDefault:
				uids = append([]string{ds.UID}, uids...)
			default:
				uids = append(uids, ds.UID)
			}
		}
	}
	if len(uids) == 0 {
		t.Fatal("no Prometheus datasource with a uid in configs/grafana/provisioning/datasources")
	}
	return uids
}

// datasourceVariables resolves a dashboard's datasource variables as
// Grafana does when it provisions the file: a variable of type datasource
// offers the datasources of its plugin (its query), and its saved value,
// the ${DS_...} placeholder that only the import dialog fills in, is none
// of them, so it starts on the default one (uids[0]). Each saved value
// must be the placeholder of a datasource input in __inputs, so that the
// import dialog asks for the datasource.
func datasourceVariables(file string, d dashboard, uids []string) (map[string]string, error) {
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "datasource" {
			continue
		}
		var plugin string
		if err := json.Unmarshal(v.Query, &plugin); err != nil || plugin != "prometheus" {
			return nil, fmt.Errorf("%s: datasource variable %q: query %s, want \"prometheus\"", file, v.Name, v.Query)
		}
		var cur struct {
			Value string `json:"value"`
		}
		json.Unmarshal(v.Current, &cur)
		if !slices.ContainsFunc(d.Inputs, func(in input) bool {
			return in.Type == "datasource" && in.PluginID == plugin && cur.Value == "${"+in.Name+"}"
		}) {
			return nil, fmt.Errorf("%s: datasource variable %q: value %q is not the placeholder of a prometheus datasource in __inputs %+v, so Grafana's import dialog would not ask for it", file, v.Name, cur.Value, d.Inputs)
		}
		vars[v.Name] = uids[0]
	}
	return vars, nil
}

// literalJob matches a job label matched against a name written in, not a
// variable.
var literalJob = regexp.MustCompile(`\bjob\s*(=|!=|=~|!~)\s*"[^"$]`)

// TestDashboards checks the dashboards without running anything: each
// parses, has a unique uid and the template variable model, each panel
// and query names its datasource through a datasource variable (so the
// dashboard imports anywhere) that resolves to a provisioned one, and
// each query's variables are known.
func TestDashboards(t *testing.T) {
	root := repoRoot(t)
	uids := provisionedDatasources(t, root)
	var dsVars map[string]string
	checkDS := func(where string, ds *datasourceRef) {
		if ds == nil {
			return // a target without one uses its panel's
		}
		uid, err := expand(ds.UID, dsVars)
		if ds.Type != "prometheus" || err != nil || uid == ds.UID || !slices.Contains(uids, uid) {
			t.Errorf("%s: datasource %+v (%v), want type prometheus and a datasource variable %v resolving to a provisioned uid %q", where, *ds, err, dsVars, uids)
		}
	}
	seen := map[string]string{}
	for _, f := range dashboardFiles(t, root) {
		rel, _ := filepath.Rel(root, f)
		d, err := readDashboard(f)
		if err != nil {
			t.Error(err)
			continue
		}
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: want a uid and a title", rel)
		}
		if other, dup := seen[d.UID]; dup {
			t.Errorf("%s: uid %q already used by %s", rel, d.UID, other)
		}
		seen[d.UID] = rel
		if dsVars, err = datasourceVariables(rel, d, uids); err != nil {
			t.Error(err)
			continue
		}
		hasModel := false
		for _, v := range d.Templating.List {
			hasModel = hasModel || v.Name == "model"
			checkDS(fmt.Sprintf("%s: variable %q", rel, v.Name), v.Datasource)
		}
		if !hasModel {
			t.Errorf("%s: no template variable model", rel)
		}
		if !slices.ContainsFunc(d.Templating.List, func(v variable) bool { return v.Name == "job" && v.Type == "query" }) {
			t.Errorf("%s: no template variable job: a scrape job's name is the operator's (a ServiceMonitor's is namespace/name)", rel)
		}
		var walk func(ps []panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				where := fmt.Sprintf("%s: panel %q", rel, p.Title)
				if p.Type == "row" {
					walk(p.Panels)
					continue
				}
				if p.Datasource == nil {
					t.Errorf("%s: no datasource", where)
				}
				checkDS(where, p.Datasource)
				if len(p.Targets) == 0 {
					t.Errorf("%s: no queries", where)
				}
				for _, tg := range p.Targets {
					checkDS(fmt.Sprintf("%s target %s", where, tg.RefID), tg.Datasource)
					if strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("%s target %s: empty expr", where, tg.RefID)
					}
				}
			}
		}
		walk(d.Panels)
		qs, err := queriesOf(rel, d)
		if err != nil {
			t.Error(err)
		}
		for _, q := range qs {
			if _, err := expand(q.expr, testVars); err != nil {
				t.Errorf("%s: %v", q.where, err)
			}
			if literalJob.MatchString(q.expr) {
				t.Errorf("%s: %s names a job; select it with $job", q.where, q.expr)
			}
		}
	}
}

// allQueries returns every query of every dashboard, file by file, with
// the test's variables substituted.
func allQueries(t *testing.T, root string) []query {
	t.Helper()
	var all []query
	for _, f := range dashboardFiles(t, root) {
		rel, _ := filepath.Rel(root, f)
		d, err := readDashboard(f)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := queriesOf(rel, d)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.expr, err = expand(q.expr, testVars); err != nil {
				t.Fatalf("%s: %v", q.where, err)
			}
			all = append(all, q)
		}
	}
	return all
}
