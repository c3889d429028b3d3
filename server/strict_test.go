package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"rnnserve/server/api"
)

// TestTextInputStrict: invalid UTF-8 and lone surrogate escapes are a 400
// in every text a client sends (generate prompts and stop strings, trees,
// ids, sequence ids, names), never replaced quietly; a surrogate pair and
// other escapes are text like any other.
func TestTextInputStrict(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	_, ths := newTreeServer(t, 0)
	tok := tokensJSON([][]int64{{1, 2}})
	for _, c := range []struct {
		what, url, body string
		code            int
	}{
		{"prompt with a lone high surrogate", hs.URL + "/v2/models/lm/generate", `{"text_input": "ab\ud800c", "parameters": {"max_tokens": 2}}`, 400},
		{"prompt with a lone low surrogate", hs.URL + "/v2/models/lm/generate_stream", `{"text_input": "\udc00", "parameters": {"max_tokens": 2}}`, 400},
		{"prompt with invalid UTF-8", hs.URL + "/v2/models/lm/generate", "{\"text_input\": \"a\xffb\", \"parameters\": {\"max_tokens\": 2}}", 400},
		{"prompt cut inside a UTF-8 sequence", hs.URL + "/v2/models/lm/generate", "{\"prompt\": \"a\xe2\x82\"}", 400},
		{"stop string with a lone surrogate", hs.URL + "/v2/models/lm/generate", `{"text_input": "ab", "parameters": {"max_tokens": 2, "stop": ["\udfff"]}}`, 400},
		{"prompt with a surrogate pair", hs.URL + "/v2/models/lm/generate", `{"text_input": "a\ud83d\ude00 \u00e9\n", "parameters": {"max_tokens": 2}}`, 200},
		{"infer id with a lone surrogate", hs.URL + "/v2/models/lm/infer", `{"id": "\ud801", "inputs": [` + tok + `]}`, 400},
		{"sequence id with invalid UTF-8", hs.URL + "/v2/models/lm/infer", "{\"inputs\": [" + tok + "], \"parameters\": {\"sequence_id\": \"s\xc0\", \"sequence_start\": true}}", 400},
		{"input name with invalid UTF-8", hs.URL + "/v2/models/lm/infer", "{\"inputs\": [{\"name\": \"tok\xfe\", \"datatype\": \"INT64\", \"shape\": [1, 1], \"data\": [1]}]}", 400},
		{"tree with invalid UTF-8", ths.URL + "/v2/models/treelstm/infer", "{\"inputs\": [{\"name\": \"trees\", \"datatype\": \"BYTES\", \"shape\": [1], \"data\": [\"(3\xff)\"]}]}", 400},
		{"tree with a lone surrogate", ths.URL + "/v2/models/treelstm/infer", `{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [1], "data": ["((3) (\udbff))"]}]}`, 400},
		{"load with invalid UTF-8 in the body", hs.URL + "/v2/repository/index", "{\"repository_name\": \"\xff\"}", 400},
	} {
		code, b, _ := post(t, c.url, c.body)
		var e api.Error
		switch {
		case code != c.code:
			t.Errorf("%s: %d %s, want %d", c.what, code, b, c.code)
		case code == 400 && (json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, "byte ")):
			t.Errorf("%s: %s, want an error naming the offset", c.what, b)
		}
	}
}

// TestEchoBounded: whatever a client sends, an error repeats a bounded
// part of it.
func TestEchoBounded(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	long := strings.Repeat("n", 1<<20)
	for _, c := range []struct{ what, method, url, body string }{
		{"a 100 KB model name", http.MethodGet, hs.URL + "/v2/models/" + long[:100<<10], ""},
		{"a 100 KB model name to infer", http.MethodPost, hs.URL + "/v2/models/" + long[:100<<10] + "/infer", "{}"},
		{"a 100 KB version", http.MethodPost, hs.URL + "/v2/models/lm/versions/" + long[:100<<10] + "/infer", "{}"},
		{"a 1 MB input name", http.MethodPost, hs.URL + "/v2/models/lm/infer", `{"inputs": [{"name": "` + long + `", "datatype": "INT64", "shape": [1, 1], "data": [1]}]}`},
		{"a 1 MB datatype", http.MethodPost, hs.URL + "/v2/models/lm/infer", `{"inputs": [{"name": "tokens", "datatype": "` + long + `", "shape": [1, 1], "data": [1]}]}`},
		{"a 1 MB output name", http.MethodPost, hs.URL + "/v2/models/lm/infer", `{"inputs": [` + tokensJSON([][]int64{{1}}) + `], "outputs": [{"name": "` + long + `"}]}`},
		{"a 1 MB parameter name", http.MethodPost, hs.URL + "/v2/models/lm/infer", `{"inputs": [` + tokensJSON([][]int64{{1}}) + `], "outputs": [{"name": "top_k", "parameters": {"` + long + `": 1}}]}`},
		{"a 1 MB unknown field", http.MethodPost, hs.URL + "/v2/models/lm/infer", `{"` + long + `": 1}`},
		{"a 1 MB number", http.MethodPost, hs.URL + "/v2/models/lm/infer", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 1], "data": [1` + strings.Repeat("0", 1<<20) + `]}]}`},
		{"a 1 MB stop string", http.MethodPost, hs.URL + "/v2/models/lm/generate", `{"text_input": "a", "stop": ["` + long + `"]}`},
	} {
		req, _ := http.NewRequest(c.method, c.url, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		var e api.Error
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode < 400 || err != nil || len(e.Error) > maxErrorBytes+3 || e.Error == "" {
			t.Errorf("%s: %d, %d-byte error (%v), want a 4xx with at most %d bytes", c.what, resp.StatusCode, len(e.Error), err, maxErrorBytes)
		}
	}
}

// TestTreeRequestsStrict: tree requests are as strict as sequence
// requests: unknown output parameters, an output twice, sequence
// parameters, data after the object and a bad executor are each a 400
// naming what is wrong.
func TestTreeRequestsStrict(t *testing.T) {
	_, hs := newTreeServer(t, 0)
	url := hs.URL + "/v2/models/treelstm/infer"
	one := []string{"((3) (4))"}
	for _, c := range []struct {
		what, body, want string
	}{
		{"unknown output parameter", `{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [1], "data": ["(3)"]}], "outputs": [{"name": "probs", "parameters": {"last_step": true}}]}`, "unknown parameter"},
		{"an output twice", treeRequest(one, "", "probs", "probs"), "asked for twice"},
		{"sequence_id", treeRequest(one, `{"sequence_id": 7}`), "sequence parameters are not supported"},
		{"sequence_end", treeRequest(one, `{"sequence_id": "a", "sequence_end": true}`), "sequence parameters are not supported"},
		{"bad executor", treeRequest(one, `{"executor": 3}`), "executor must be a string"},
		{"data after the object", treeRequest(one, "") + " {}", "data after the request object"},
	} {
		code, b, _ := post(t, url, c.body)
		if code != http.StatusBadRequest || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s, want 400 mentioning %q", c.what, code, b, c.want)
		}
	}
}
