package server

import (
	"strconv"
	"strings"
	"testing"

	"rnnserve/schedule"
)

// TestPlanCacheMetric: unbatched requests of as many lengths as
// schedule.MaxPlanShapes and a few more keep plans for MaxPlanShapes
// shapes and drop the rest, and /metrics says so per model; a model not
// yet asked keeps none.
func TestPlanCacheMetric(t *testing.T) {
	off := false
	_, hs := newTestServer(t, func(o *Options) { o.Batching.Enabled = &off }, true)
	const extra = 5
	for T := 1; T <= schedule.MaxPlanShapes+extra; T++ {
		row := make([]int64, T)
		for i := range row {
			row[i] = int64(i % 256)
		}
		body := `{"inputs": [` + tokensJSON([][]int64{row}) + `]}`
		if code, resp, _ := post(t, hs.URL+"/v2/models/lm/infer", body); code != 200 {
			t.Fatalf("length %d: %d %s", T, code, resp)
		}
	}
	for _, c := range []struct{ sample, want string }{
		{`rnnserve_plan_cache_shapes{model="lm"}`, strconv.Itoa(schedule.MaxPlanShapes)},
		{`rnnserve_plan_cache_evictions_total{model="lm"}`, strconv.Itoa(extra)},
		{`rnnserve_plan_cache_shapes{model="feat"}`, "0"},
	} {
		if got := metric(t, hs.URL, c.sample); got != c.want {
			t.Errorf("%s = %q, want %s", c.sample, got, c.want)
		}
	}
	if _, body := get(t, hs.URL+"/metrics"); !strings.Contains(string(body), "# TYPE rnnserve_plan_cache_evictions_total counter") {
		t.Error("rnnserve_plan_cache_evictions_total is not a counter")
	}
}
