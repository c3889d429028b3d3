package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"rnnserve/server/api"
	"rnnserve/server/internal/infer"
)

// TestGenerateFromJSON: a generate body takes its prompt from text_input
// or prompt and each sampling setting from parameters or the top level,
// never both; stop is a string or a list of strings.
func TestGenerateFromJSON(t *testing.T) {
	read := func(body string) (*infer.GenerateRequest, error) {
		var w api.GenerateRequest
		dec := json.NewDecoder(strings.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&w); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		g := &infer.GenerateRequest{Model: "lm"}
		return g, GenerateFromJSON(&w, g, 4)
	}
	g, err := read(`{"text_input": "Hi", "max_tokens": 3, "parameters": {"temperature": 0.5, "top_k": 4, "top_p": 0.9, "seed": 7, "stop": ["!", "."]}}`)
	if err != nil || string(g.Prompt) != "Hi" || g.MaxTokens != 3 || g.Temperature != 0.5 || g.TopK != 4 || g.TopP != 0.9 || g.Seed != 7 ||
		fmt.Sprintf("%q", g.Stop) != `["!" "."]` {
		t.Errorf("%+v %v", g, err)
	}
	g, err = read(`{"prompt": "Yo", "prompt_tokens": [1, 2], "stop": "?"}`)
	if err != nil || string(g.Prompt) != "Yo" || fmt.Sprint(g.PromptTokens) != "[1 2]" || fmt.Sprintf("%q", g.Stop) != `["?"]` || g.MaxTokens != 0 {
		t.Errorf("%+v %v", g, err)
	}
	if g, err := read(`{"prompt_tokens": []}`); err != nil || g.PromptTokens == nil || len(g.PromptTokens) != 0 {
		t.Errorf("empty prompt_tokens: %v %v, want an empty list (not none)", g.PromptTokens, err)
	}
	if g, err := read(`{"prompt_tokens": null}`); err != nil || g.PromptTokens != nil {
		t.Errorf("null prompt_tokens: %v %v, want none", g.PromptTokens, err)
	}
	for _, c := range []struct{ body, want string }{
		{`{"text_input": "a", "prompt": "b"}`, "give text_input or prompt, not both"},
		{`{"max_tokens": 2, "parameters": {"max_tokens": 3}}`, "max_tokens given both at the top level and in parameters"},
		{`{"seed": 1, "parameters": {"seed": 1}}`, "seed given both"},
		{`{"stop": "a", "parameters": {"stop": "b"}}`, "stop given both"},
		{`{"max_tokens": 0}`, "max_tokens 0, want at least 1"},
		{`{"stop": 5}`, "stop must be a string or a list of strings"},
		{`{"parameters": {"stop": [1]}}`, "stop must be a string or a list of strings"},
		{`{"prompt_tokens": [1, 2, 3, 4, 5]}`, "prompt of 5 tokens exceeds max_steps 4"},
		{`{"prompt_tokens": [[1]]}`, "nested deeper"},
		{`{"prompt_tokens": 5}`, "must be an array"},
		{`{"prompt_tokens": [1.5]}`, "not a 64-bit integer"},
		{`{"prompt_tokens": ["1,2,3,4,5"]}`, "only numbers"},
	} {
		if _, err := read(c.body); !errors.Is(err, infer.ErrBadRequest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a bad request with %q", c.body, err, c.want)
		}
	}
}
