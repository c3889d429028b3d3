package server

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rnnserve/internal/host"
	"rnnserve/models"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// lmSpec is a small byte-level LSTM LM; hidden sets its state shape.
func lmSpec(hidden, seed int) string {
	return "cell: lstm\ninput_size: 8\nhidden_size: " + itoa(hidden) + "\nnum_layers: 1\nembedding: {vocab_size: 256}\nhead: {out_features: 256, activation: log_softmax}\nseed: " + itoa(seed) + "\n"
}

func itoa(n int) string { return strconv.Itoa(n) }

// repoOf is the multi-model repository in fsys.
func repoOf(t testing.TB, fsys fs.FS) *Repository {
	t.Helper()
	r, err := NewRepository(fsys, "")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newRepoServer serves a temporary repository directory through
// os.DirFS, as cmd/serve does, with model control explicit, and returns
// the directory.
func newRepoServer(t *testing.T, files map[string]string) (*Server, *httptest.Server, string) {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := LoadRepository(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.CacheBytes, o.TrafficSteps = 1<<20, 4
	o.ModelControlMode = ControlExplicit
	deps := testDeps(t, o)
	deps.Repository = repoOf(t, os.DirFS(dir))
	s := newServer(t, entries, o, deps)
	return s, serveHTTP(t, s, true), dir
}

func index(t *testing.T, url string, body string) map[string]api.RepositoryModel {
	t.Helper()
	code, resp, _ := post(t, url+"/v2/repository/index", body)
	var idx []api.RepositoryModel
	if code != 200 || json.Unmarshal(resp, &idx) != nil {
		t.Fatalf("index: %d %s", code, resp)
	}
	m := map[string]api.RepositoryModel{}
	for _, e := range idx {
		m[e.Name] = e
	}
	return m
}

func seqBody(id string, start, end bool, toks ...int64) string {
	p := `"sequence_id": "` + id + `"`
	if start {
		p += `, "sequence_start": true`
	}
	if end {
		p += `, "sequence_end": true`
	}
	return `{"parameters": {` + p + `}, "inputs": [` + tokensJSON([][]int64{toks}) + `], "outputs": [{"name": "hidden"}]}`
}

// TestRepository: index, unload, load and reload through the REST
// endpoints; failed loads keep the old version serving; names and links
// that leave the repository are refused.
func TestRepository(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "model.yaml"), []byte(lmSpec(4, 1)), 0o644)
	os.WriteFile(filepath.Join(outside, "secret.safetensors"), []byte("not weights"), 0o644)
	s, hs, dir := newRepoServer(t, map[string]string{
		"a/model.yaml":    lmSpec(8, 1),
		"b/model.yaml":    lmSpec(8, 2),
		"notamodel/x.txt": "hello",
	})
	// A model whose spec names weights outside the repository, added
	// after the start (LoadRepository would refuse the whole repository).
	os.MkdirAll(filepath.Join(dir, "escape"), 0o755)
	os.WriteFile(filepath.Join(dir, "escape", "model.yaml"), []byte("cell: lstm\ninput_size: 8\nhidden_size: 4\nembedding: {vocab_size: 256}\nweights: ../../"+filepath.Base(outside)+"/secret.safetensors\n"), 0o644)
	idx := index(t, hs.URL, "")
	if len(idx) != 3 || idx["a"].State != "READY" || idx["b"].State != "READY" || idx["escape"].State != "UNAVAILABLE" {
		t.Fatalf("index: %+v", idx)
	}
	infer := func(model string) int {
		code, _, _ := post(t, hs.URL+"/v2/models/"+model+"/infer", `{"inputs": [`+tokensJSON([][]int64{{1, 2}})+`]}`)
		return code
	}
	// Unload, then the model is gone and the index says why.
	if code, body, _ := post(t, hs.URL+"/v2/repository/models/b/unload", `{"parameters": {"unload_dependents": false}}`); code != 200 {
		t.Fatalf("unload: %d %s", code, body)
	}
	if code := infer("b"); code != 404 {
		t.Errorf("infer after unload: %d", code)
	}
	if e := index(t, hs.URL, `{"ready": false}`)["b"]; e.State != "UNAVAILABLE" || e.Reason != "unloaded" {
		t.Errorf("index after unload: %+v", e)
	}
	if _, ok := index(t, hs.URL, `{"ready": true}`)["b"]; ok {
		t.Error("ready index lists an unloaded model")
	}
	if code, body, _ := post(t, hs.URL+"/v2/repository/models/b/load", ""); code != 200 {
		t.Fatalf("load: %d %s", code, body)
	}
	if code := infer("b"); code != 200 {
		t.Errorf("infer after load: %d", code)
	}
	// A broken spec, truncated weights, a missing directory: the load
	// fails with a clear error, and the old version keeps serving.
	net := seqOf(t, s, "a").net
	weights, err := models.EncodeWeights(net)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "a", "w.safetensors"), weights[:len(weights)/2], 0o644)
	for _, c := range []struct {
		what, spec string
		code       int
		want       string
	}{
		{"truncated weights", lmSpec(8, 1) + "weights: w.safetensors\n", 400, "model load failed"},
		{"bad spec", "cell: lstm\nhidden_size: -1\n", 400, "model load failed"},
	} {
		os.WriteFile(filepath.Join(dir, "a", "model.yaml"), []byte(c.spec), 0o644)
		code, body, _ := post(t, hs.URL+"/v2/repository/models/a/load", "{}")
		if code != c.code || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s", c.what, code, body)
		}
		if code := infer("a"); code != 200 {
			t.Errorf("%s: the old version stopped serving: %d", c.what, code)
		}
		if e := index(t, hs.URL, "")["a"]; e.State != "READY" {
			t.Errorf("%s: index %+v", c.what, e)
		}
	}
	for _, c := range []struct {
		name string
		code int
		want string
	}{
		{"nope", 404, "no model.yaml"},
		{"notamodel", 404, "no model.yaml"},
		{"escape", 400, "model load failed"},
		{"..", 400, "not a directory name"},
		{".", 400, "not a directory name"},
		{"a/b", 400, "path separator"},
		{`a\b`, 400, "path separator"},
		{"../" + filepath.Base(outside), 400, "path separator"},
	} {
		err := s.Load(c.name)
		if StatusOf(err) != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("load %q: %v (%d), want %d %q", c.name, err, StatusOf(err), c.code, c.want)
		}
	}
	// The same over HTTP, escaped so that the name reaches the handler.
	if code, body, _ := post(t, hs.URL+"/v2/repository/models/a%5Cb/load", ""); code != 400 || !strings.Contains(string(body), "path separator") {
		t.Errorf("load a\\b over HTTP: %d %s", code, body)
	}
	// A model folder the operator linked in from elsewhere is followed;
	// names from requests still cannot leave the root (above).
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := s.Load("link"); err != nil {
		t.Errorf("load through an operator's symlink: %v", err)
	}
	if code := infer("link"); code != 200 {
		t.Errorf("infer on the linked model: %d", code)
	}
	if code, body, _ := post(t, hs.URL+"/v2/repository/models/a/load", `{"parameters": {"config": "{}"}}`); code != 400 || !strings.Contains(string(body), "not supported") {
		t.Errorf("load with a config override: %d %s", code, body)
	}
	if code, _, _ := post(t, hs.URL+"/v2/repository/models/zzz/unload", ""); code != 404 {
		t.Errorf("unload of an unknown model: %d", code)
	}
	if code, _, _ := post(t, hs.URL+"/v2/repository/index", `{"repository_name": "other"}`); code != 400 {
		t.Errorf("index of another repository: %d", code)
	}
}

// TestHotSwap reloads a model again and again under concurrent requests:
// no request fails, and the new version serves once loaded.
func TestHotSwap(t *testing.T) {
	s, hs, dir := newRepoServer(t, map[string]string{"a/model.yaml": lmSpec(8, 1)})
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, body, _ := post(t, hs.URL+"/v2/models/a/infer", `{"inputs": [`+tokensJSON([][]int64{{1, 2, 3, 4, 5, 6, 7, 8}})+`]}`)
				if code == 200 {
					ok.Add(1)
				} else {
					failed.Add(1)
					t.Errorf("request during reload: %d %s", code, body)
				}
			}
		})
	}
	for i := range 6 {
		os.WriteFile(filepath.Join(dir, "a", "model.yaml"), []byte(lmSpec(8, 10+i)), 0o644)
		if err := s.Load("a"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if ok.Load() == 0 || failed.Load() != 0 {
		t.Errorf("%d requests served, %d failed during reloads", ok.Load(), failed.Load())
	}
	if got := s.table()["a"].base().entry.Model.Spec.Seed; got != 15 {
		t.Errorf("serving seed %d after the reloads, want 15", got)
	}
}

// TestSequencesAcrossLoads: a reload with the same state shape keeps live
// sequences; one with another shape, and an unload, end them with an
// error that says why.
func TestSequencesAcrossLoads(t *testing.T) {
	s, hs, dir := newRepoServer(t, map[string]string{"a/model.yaml": lmSpec(8, 1)})
	url := hs.URL + "/v2/models/a/infer"
	step := func(id string, start bool) (int, string) {
		code, body, _ := post(t, url, seqBody(id, start, false, 1, 2))
		return code, string(body)
	}
	if code, body := step("s1", true); code != 200 {
		t.Fatalf("start: %d %s", code, body)
	}
	if err := s.Load("a"); err != nil { // same shape
		t.Fatal(err)
	}
	if code, body := step("s1", false); code != 200 {
		t.Errorf("continue after a same-shape reload: %d %s", code, body)
	}
	os.WriteFile(filepath.Join(dir, "a", "model.yaml"), []byte(lmSpec(12, 1)), 0o644)
	if err := s.Load("a"); err != nil {
		t.Fatal(err)
	}
	if code, body := step("s1", false); code != 410 || !strings.Contains(body, "reloaded with a different state shape") {
		t.Errorf("continue after a reshaping reload: %d %s", code, body)
	}
	if code, body := step("s2", true); code != 200 {
		t.Fatalf("start s2: %d %s", code, body)
	}
	if err := s.Unload("a"); err != nil {
		t.Fatal(err)
	}
	if code, body := step("s2", false); code != 404 || !strings.Contains(body, "unknown model") {
		t.Errorf("continue on an unloaded model: %d %s", code, body)
	}
	if err := s.Load("a"); err != nil {
		t.Fatal(err)
	}
	if code, body := step("s2", false); code != 410 || !strings.Contains(body, "was unloaded") {
		t.Errorf("continue after unload and load: %d %s", code, body)
	}
}

// TestUnloadInFlight: a request in flight when its model is unloaded
// finishes; the batcher then stops.
func TestUnloadInFlight(t *testing.T) {
	s, hs, _ := newRepoServer(t, map[string]string{"a/model.yaml": lmSpec(8, 1)})
	done := make(chan int)
	go func() {
		code, _, _ := post(t, hs.URL+"/v2/models/a/infer", `{"inputs": [`+tokensJSON([][]int64{make([]int64, 3000)})+`]}`)
		done <- code
	}()
	for deadline := time.Now().Add(5 * time.Second); s.table()["a"].base().stats.inflight.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request never started")
		}
	}
	if err := s.Unload("a"); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != http.StatusOK {
		t.Errorf("in-flight request during unload: %d", code)
	}
}

// TestResidentWeights: the server counts the weights of the models it
// has built and not retired, through loads, reloads, unloads and failed
// loads, exports the count (rnnserve_loaded_weight_bytes), stamps every
// execution of a sequence or tree model, and P's programs judge their
// input projections by the models that ran since they last did.
func TestResidentWeights(t *testing.T) {
	s, hs, dir := newRepoServer(t, map[string]string{
		"a/model.yaml": lmSpec(16, 1), "a/config.yaml": "schedule: P\n",
		"b/model.yaml": lmSpec(32, 2),
		"t/model.yaml": "kind: tree\ncell: binary_treelstm\nembedding_size: 8\nhidden_size: 8\nclasses: 3\nvocab_file: vocab.txt\nseed: 1\n",
		"t/vocab.txt":  "a\nb\nc\n",
	})
	weights := func(name string) int64 { return s.table()[name].base().entry.Model.Net.WeightBytes() }
	want := func(what string, n int64) {
		t.Helper()
		if got := s.resident.Bytes(); got != n {
			t.Fatalf("%s: %d weight bytes counted, want %d", what, got, n)
		}
		if got, err := strconv.ParseFloat(metric(t, hs.URL, "rnnserve_loaded_weight_bytes"), 64); err != nil || got != float64(n) {
			t.Fatalf("%s: rnnserve_loaded_weight_bytes %v (%v), want %d", what, got, err, n)
		}
	}
	wa, wb, wt := weights("a"), weights("b"), s.table()["t"].base().entry.Tree.Net.WeightBytes()
	if wt <= 0 {
		t.Fatalf("tree model of %d weight bytes", wt)
	}
	want("all three loaded", wa+wb+wt)
	beside := func(what string, n int64) {
		t.Helper()
		if got := s.table()["a"].base().weights.Beside(); got != n {
			t.Fatalf("%s: %d weight bytes ran beside a, want %d", what, got, n)
		}
	}
	infer := func(name, body string) {
		t.Helper()
		if code, out, _ := post(t, hs.URL+"/v2/models/"+name+"/infer", body); code != http.StatusOK {
			t.Fatalf("%s: %d %s", name, code, out)
		}
	}
	seq := `{"inputs": [` + tokensJSON([][]int64{{1, 2, 3}}) + `]}`
	beside("nothing ran", 0)
	infer("b", seq)
	infer("t", treeRequest([]string{"((a) ((b) (c)))"}, ""))
	beside("b and t ran, a never", wb+wt)
	infer("a", seq)
	beside("a ran last", 0)
	infer("t", treeRequest([]string{"((a) ((b) (c)))"}, ""))
	infer("t", treeRequest([]string{"((c) (a))"}, ""))
	beside("t ran twice since a", wt)
	if err := s.Unload("t"); err != nil {
		t.Fatal(err)
	}
	want("the tree model unloaded", wa+wb)
	if err := s.Unload("b"); err != nil {
		t.Fatal(err)
	}
	want("b unloaded", wa)
	if err := s.Load("b"); err != nil {
		t.Fatal(err)
	}
	want("b loaded again", wa+wb)
	os.WriteFile(filepath.Join(dir, "a", "model.yaml"), []byte(lmSpec(24, 3)), 0o644)
	if err := s.Load("a"); err != nil {
		t.Fatal(err)
	}
	wa = weights("a")
	want("a reloaded larger", wa+wb)
	os.WriteFile(filepath.Join(dir, "b", "model.yaml"), []byte("cell: lstm\nhidden_size: -1\n"), 0o644)
	if err := s.Load("b"); err == nil {
		t.Fatal("a broken model.yaml loaded")
	}
	want("a failed reload of b", wa+wb)

	prog := s.table()["a"].(*seqModel).form.Load().prog
	if prog.Schedule != schedule.Partitioned {
		t.Fatalf("a runs %v, want P", prog.Schedule)
	}
	if !prog.ProjectionsNear() {
		t.Fatal("a small model's input projections are not near with small models beside it")
	}
	l3 := host.Get().L3()
	other := s.resident.Add(l3)
	if !prog.ProjectionsNear() {
		t.Errorf("input projections far beside %d bytes loaded and idle (L3 %d)", l3, l3)
	}
	other.Ran()
	if prog.ProjectionsNear() {
		t.Errorf("input projections near after %d bytes ran (L3 %d)", l3, l3)
	}
	infer("a", seq)
	if !prog.ProjectionsNear() {
		t.Errorf("input projections far after a ran again")
	}
	other.Remove()
}
