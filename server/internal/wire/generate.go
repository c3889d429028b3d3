package wire

import (
	"encoding/json"

	"rnnserve/server/api"
	"rnnserve/server/internal/infer"
)

// GenerateFromJSON converts a generate request body (REST generate and
// generate_stream, Triton's generate extension) into g, taking each
// parameter from "parameters" or, as Triton allows, the top level.
func GenerateFromJSON(w *api.GenerateRequest, g *infer.GenerateRequest) error {
	switch {
	case w.TextInput != nil && w.Prompt != nil:
		return infer.BadRequest("give text_input or prompt, not both")
	case w.TextInput != nil:
		g.Prompt = []byte(*w.TextInput)
	case w.Prompt != nil:
		g.Prompt = []byte(*w.Prompt)
	}
	g.PromptTokens = w.PromptTokens
	p, top := &w.Parameters, &w.GenerateOptions
	pick := func(name string, a, b bool) error {
		if a && b {
			return infer.BadRequest("%s given both at the top level and in parameters", name)
		}
		return nil
	}
	for _, chk := range []struct {
		name string
		a, b bool
	}{{"max_tokens", p.MaxTokens != nil, top.MaxTokens != nil}, {"temperature", p.Temperature != nil, top.Temperature != nil},
		{"top_k", p.TopK != nil, top.TopK != nil}, {"top_p", p.TopP != nil, top.TopP != nil},
		{"seed", p.Seed != nil, top.Seed != nil}, {"stop", p.Stop != nil, top.Stop != nil}} {
		if err := pick(chk.name, chk.a, chk.b); err != nil {
			return err
		}
	}
	if v := firstOf(p.MaxTokens, top.MaxTokens); v != nil {
		g.MaxTokens = *v
		if g.MaxTokens == 0 {
			return infer.BadRequest("max_tokens 0, want at least 1")
		}
	}
	if v := firstOf(p.Temperature, top.Temperature); v != nil {
		g.Temperature = *v
	}
	if v := firstOf(p.TopK, top.TopK); v != nil {
		g.TopK = *v
	}
	if v := firstOf(p.TopP, top.TopP); v != nil {
		g.TopP = *v
	}
	if v := firstOf(p.Seed, top.Seed); v != nil {
		g.Seed = *v
	}
	stop := p.Stop
	if stop == nil {
		stop = top.Stop
	}
	if stop != nil {
		var one string
		var many []string
		if json.Unmarshal(stop, &one) == nil {
			many = []string{one}
		} else if err := json.Unmarshal(stop, &many); err != nil {
			return infer.BadRequest("stop must be a string or a list of strings")
		}
		for _, s := range many {
			g.Stop = append(g.Stop, []byte(s))
		}
	}
	return nil
}

// firstOf is a unless it is nil, else b.
func firstOf[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}
