package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const (
	testModel = "bytelm" // bundled in the binary
	jobName   = "rnnserve"

	// buildTimeout bounds go build: seconds with a warm build cache (CI
	// runs go vet first, which leaves the dependencies compiled), up to
	// two minutes on this project's 2-core machine with a cold one.
	buildTimeout = 3 * time.Minute
	// runTimeout bounds everything after the build: starting both
	// processes, the traffic, the scrapes and the queries.
	runTimeout = time.Minute
)

// TestPrometheusConfig checks configs/prometheus/prometheus.yml with the
// installed Prometheus's promtool.
func TestPrometheusConfig(t *testing.T) {
	needTool(t, promtoolBin, prometheusPkg)
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(root, "configs", "prometheus", "prometheus.yml")
	out, err := exec.CommandContext(ctx, promtoolBin, "check", "config", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

// TestDashboardQueries runs the server and a Prometheus scraping it every
// second, drives traffic of every kind the dashboards show, and checks
// that every dashboard query returns at least one sample that is not NaN.
func TestDashboardQueries(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test builds and runs the server and Prometheus")
	}
	needTool(t, prometheusBin, prometheusPkg)
	root := repoRoot(t)
	queries := allQueries(t, root)
	dir := t.TempDir() // before the processes: their cleanups then run first

	buildCtx, cancelBuild := context.WithTimeout(context.Background(), buildTimeout)
	defer cancelBuild()
	bin := buildServer(buildCtx, t, root, dir)

	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	start := time.Now()
	_, srvAddr := startOnFreePort(ctx, t, "serve", dir, bin,
		func(addr string) []string { return []string{"-listen", addr, "-grpc-listen", "off"} }, "/v2/health/ready")
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, prometheusConfig(t, root, srvAddr), 0o644); err != nil {
		t.Fatal(err)
	}
	_, promAddr := startOnFreePort(ctx, t, "prometheus", dir, prometheusBin, func(addr string) []string {
		return []string{"--config.file=" + cfg, "--storage.tsdb.path=" + filepath.Join(dir, "tsdb"),
			"--web.listen-address=" + addr, "--log.level=warn"}
	}, "/-/ready")
	srv := &client{base: "http://" + srvAddr}
	prom := &promClient{base: "http://" + promAddr}

	// Two rounds, each scraped before the next step: the first creates
	// every series, the second moves them, so that a rate() over the
	// window sees two different samples.
	for _, round := range []string{"first", "second"} {
		srv.round(ctx, t, round)
		if t.Failed() {
			t.FailNow()
		}
		waitScraped(ctx, t, srv, prom)
	}
	t.Logf("server and Prometheus up, traffic scraped, in %v", time.Since(start).Round(time.Millisecond))

	for _, q := range queries {
		samples, err := prom.query(ctx, q.expr)
		switch {
		case err != nil:
			t.Errorf("%s: %v\n\tquery: %s", q.where, err, q.expr)
		case len(samples) == 0:
			t.Errorf("%s: no data\n\tquery: %s", q.where, q.expr)
		case !slices.ContainsFunc(samples, func(s sample) bool { return !math.IsNaN(s.value) }):
			t.Errorf("%s: every value is NaN: %v\n\tquery: %s", q.where, samples, q.expr)
		}
		if want, ok := testVars[q.label]; ok && err == nil &&
			!slices.ContainsFunc(samples, func(s sample) bool { return s.labels[q.label] == want }) {
			t.Errorf("%s: does not offer %s=%q: %v", q.where, q.label, want, samples)
		}
	}
	t.Logf("checked %d dashboard queries in %v", len(queries), time.Since(start).Round(time.Millisecond))
}

// prometheusConfig is the repository's scrape config made fit for the
// test: only the rnnserve job, scraping addr every second.
func prometheusConfig(t *testing.T, root, addr string) []byte {
	t.Helper()
	path := filepath.Join(root, "configs", "prometheus", "prometheus.yml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	global, _ := cfg["global"].(map[string]any)
	if global == nil {
		global = map[string]any{}
		cfg["global"] = global
	}
	global["scrape_interval"], global["scrape_timeout"], global["evaluation_interval"] = "1s", "1s", "1s"
	jobs, _ := cfg["scrape_configs"].([]any)
	var job map[string]any
	for _, j := range jobs {
		if m, _ := j.(map[string]any); m != nil && m["job_name"] == jobName {
			job = m
		}
	}
	if job == nil {
		t.Fatalf("%s: no scrape config with job_name %q (the dashboards select it)", path, jobName)
	}
	delete(job, "scrape_interval")
	delete(job, "scrape_timeout")
	job["static_configs"] = []any{map[string]any{"targets": []any{addr}}}
	cfg["scrape_configs"] = []any{job}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitScraped waits until Prometheus has scraped every request the server
// has counted so far: until rnnserve_requests_total adds up to the
// requests in the model's statistics.
func waitScraped(ctx context.Context, t *testing.T, srv *client, prom *promClient) {
	t.Helper()
	var resp struct {
		ModelStats []struct {
			RNNServe struct {
				Requests int64 `json:"requests"`
			} `json:"rnnserve"`
		} `json:"model_stats"`
	}
	if err := srv.getJSON(ctx, "/v2/models/"+testModel+"/stats", &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.ModelStats) != 1 {
		t.Fatalf("stats of %s: %+v", testModel, resp)
	}
	stats := resp.ModelStats[0].RNNServe
	expr := fmt.Sprintf(`sum(rnnserve_requests_total{job=%q, model=%q})`, jobName, testModel)
	var got float64
	err := poll(ctx, 200*time.Millisecond, func() (bool, error) {
		samples, err := prom.query(ctx, expr)
		if err != nil || len(samples) == 0 {
			return false, err
		}
		got = samples[0].value
		return got >= float64(stats.Requests), nil
	})
	if err != nil {
		t.Fatalf("waiting for Prometheus to scrape %d requests (has %v): %v", stats.Requests, got, err)
	}
}

// poll calls cond every interval until it reports true or ctx ends.
func poll(ctx context.Context, every time.Duration, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// client talks to the server under test.
type client struct {
	base string
}

var httpClient = &http.Client{Timeout: 20 * time.Second}

// post sends body (JSON-encoded unless it is []byte) and returns the
// status and response body.
func (c *client) post(ctx context.Context, path string, body any, header ...string) (int, []byte, error) {
	data, ok := body.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return 0, nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(data))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

func (c *client) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// tokens are a byte-level model's token ids for s.
func tokens(s string) []int64 {
	ids := make([]int64, len(s))
	for i := range len(s) {
		ids[i] = int64(s[i])
	}
	return ids
}

// inferRequest is a KServe v2 infer request for token rows of equal
// length, asking for the top 3 next tokens.
func inferRequest(params map[string]any, rows ...[]int64) map[string]any {
	var data []int64
	for _, r := range rows {
		data = append(data, r...)
	}
	req := map[string]any{
		"inputs": []any{map[string]any{"name": "tokens", "datatype": "INT64",
			"shape": []int{len(rows), len(rows[0])}, "data": data}},
		"outputs": []any{map[string]any{"name": "top_k", "parameters": map[string]any{"k": 3, "last_step": true}}},
	}
	if params != nil {
		req["parameters"] = params
	}
	return req
}

// round sends one round of traffic: infer requests alone, batched and
// concurrent, a stateful sequence (and one left open), a streamed
// generation, and requests that fail with 4xx codes.
func (c *client) round(ctx context.Context, t *testing.T, round string) {
	t.Helper()
	infer := "/v2/models/" + testModel + "/infer"
	seq := "e2e-" + round
	calls := []struct {
		what string
		body any
		want int
	}{
		{"infer", inferRequest(nil, tokens("The ")), http.StatusOK},
		{"infer, 2 rows", inferRequest(nil, tokens("This program"), tokens("is free soft")), http.StatusOK},
		{"sequence start", inferRequest(map[string]any{"sequence_id": seq, "sequence_start": true}, tokens("Permission ")), http.StatusOK},
		{"sequence middle", inferRequest(map[string]any{"sequence_id": seq}, tokens("is hereby ")), http.StatusOK},
		{"sequence end", inferRequest(map[string]any{"sequence_id": seq, "sequence_end": true}, tokens("granted")), http.StatusOK},
		{"ended sequence", inferRequest(map[string]any{"sequence_id": seq}, tokens(",")), http.StatusGone},
		{"unknown sequence", inferRequest(map[string]any{"sequence_id": seq + "-unknown"}, tokens(",")), http.StatusNotFound},
		{"sequence left open", inferRequest(map[string]any{"sequence_id": seq + "-open", "sequence_start": true}, tokens("GNU ")), http.StatusOK},
		{"token outside the vocabulary", inferRequest(nil, []int64{72, 256}), http.StatusBadRequest},
		{"malformed JSON", []byte(`{"inputs": [`), http.StatusBadRequest},
		{"unknown input", []byte(`{"inputs": [{"name": "pixels", "datatype": "FP32", "shape": [1, 1], "data": [0]}]}`), http.StatusBadRequest},
	}
	for _, call := range calls {
		code, body, err := c.post(ctx, infer, call.body)
		if err != nil {
			t.Fatalf("%s round, %s: %v", round, call.what, err)
		}
		if code != call.want {
			t.Errorf("%s round, %s: status %d, want %d: %s", round, call.what, code, call.want, body)
		}
	}

	// Concurrent requests share the running batch.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			req := inferRequest(nil, tokens(fmt.Sprintf("Copyright (C) 20%02d the authors", i)))
			code, body, err := c.post(ctx, infer, req)
			if err != nil || code != http.StatusOK {
				t.Errorf("%s round, concurrent infer %d: status %d, %v: %s", round, i, code, err, body)
			}
		})
	}
	wg.Wait()

	c.generate(ctx, t, round)
}

// generate streams a generation of a few tokens (as NDJSON, which the
// client asks for) and checks the stream.
func (c *client) generate(ctx context.Context, t *testing.T, round string) {
	t.Helper()
	const n = 16
	code, body, err := c.post(ctx, "/v2/models/"+testModel+"/generate_stream",
		map[string]any{"text_input": "This program is ", "max_tokens": n, "temperature": 0.8, "top_k": 40, "seed": 1},
		"Accept", "application/x-ndjson")
	if err != nil {
		t.Fatalf("%s round, generate: %v", round, err)
	}
	if code != http.StatusOK {
		t.Fatalf("%s round, generate: status %d: %s", round, code, body)
	}
	type event struct {
		Done   bool   `json:"done"`
		Reason string `json:"finish_reason"`
	}
	var events []event
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%s round, generate: line %d: %v: %s", round, len(events)+1, err, sc.Bytes())
		}
		events = append(events, ev)
	}
	if len(events) != n+1 || !events[n].Done || events[n].Reason != "length" {
		t.Errorf("%s round, generate: want %d tokens then done with finish_reason length, got:\n%s", round, n, body)
	}
}

// promClient queries Prometheus's HTTP API.
type promClient struct {
	base string
}

// sample is one element of an instant query's result.
type sample struct {
	labels map[string]string
	value  float64
}

func (s sample) String() string { return fmt.Sprintf("%v=%v", s.labels, s.value) }

// query evaluates expr at the current time (/api/v1/query).
func (c *promClient) query(ctx context.Context, expr string) ([]sample, error) {
	u := c.base + "/api/v1/query?" + url.Values{"query": {expr}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("query API: %s: %w", resp.Status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query API: %s: %s: %s", resp.Status, r.ErrorType, r.Error)
	}
	switch r.Data.ResultType {
	case "vector":
		var vs []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(r.Data.Result, &vs); err != nil {
			return nil, err
		}
		out := make([]sample, len(vs))
		for i, v := range vs {
			if out[i].value, err = sampleValue(v.Value); err != nil {
				return nil, err
			}
			out[i].labels = v.Metric
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(r.Data.Result, &v); err != nil {
			return nil, err
		}
		x, err := sampleValue(v)
		return []sample{{value: x}}, err
	default:
		return nil, fmt.Errorf("result type %q, want vector or scalar", r.Data.ResultType)
	}
}

// sampleValue reads the value of a [timestamp, "value"] pair.
func sampleValue(v [2]any) (float64, error) {
	s, ok := v[1].(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v[1])
	}
	return strconv.ParseFloat(s, 64)
}
