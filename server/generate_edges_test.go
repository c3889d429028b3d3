package server

import (
	"encoding/json"
	"testing"

	"rnnserve/server/api"
)

// TestGenerateDefaultMaxTokens: a request without max_tokens gets the
// default, 64, or max_generate_tokens when that is less; it is not refused
// for a max_tokens it never sent.
func TestGenerateDefaultMaxTokens(t *testing.T) {
	_, hs := newTestServer(t, func(o *Options) { o.MaxGenerateTokens = 8 }, true)
	code, body, _ := post(t, hs.URL+"/v2/models/lm/generate", `{"text_input": "Hi"}`)
	var res api.GenerateResponse
	if code != 200 || json.Unmarshal(body, &res) != nil {
		t.Fatalf("no max_tokens, max_generate_tokens 8: %d %s, want 200", code, body)
	}
	if len(res.RNNServe.Tokens) != 8 || res.RNNServe.FinishReason != "length" {
		t.Errorf("no max_tokens, max_generate_tokens 8: %d tokens, %q; want 8, length", len(res.RNNServe.Tokens), res.RNNServe.FinishReason)
	}
	if code, body, _ := post(t, hs.URL+"/v2/models/lm/generate", `{"text_input": "Hi", "max_tokens": 9}`); code != 400 {
		t.Errorf("max_tokens 9 over max_generate_tokens 8: %d %s, want 400", code, body)
	}
}
