package wire

import (
	"bytes"
	"encoding/json"

	"rnnserve/server/api"
	"rnnserve/server/internal/infer"
)

// GenerateFromJSON converts a generate request body (REST generate and
// generate_stream, Triton's generate extension) into g, taking each
// parameter from "parameters" or, as Triton allows, the top level.
// prompt_tokens of more than maxSteps ids are refused before they are
// decoded.
func GenerateFromJSON(w *api.GenerateRequest, g *infer.GenerateRequest, maxSteps int) error {
	switch {
	case w.TextInput != nil && w.Prompt != nil:
		return infer.BadRequest("give text_input or prompt, not both")
	case w.TextInput != nil:
		g.Prompt = []byte(*w.TextInput)
	case w.Prompt != nil:
		g.Prompt = []byte(*w.Prompt)
	}
	if err := promptTokens(w.PromptTokens, maxSteps, g); err != nil {
		return err
	}
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

// promptTokens reads prompt_tokens, a flat JSON array of ids (absent or
// null: none), into g: the ids are counted first, so that a body of
// millions of them is refused without allocating eight bytes for each
// two of its text.
func promptTokens(raw api.RawData, maxSteps int, g *infer.GenerateRequest) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	n := max(arrayLen(raw), 0) // not an array: jsonData says so
	if n > maxSteps {
		return infer.BadRequest("prompt of %d tokens exceeds max_steps %d", n, maxSteps)
	}
	t := infer.Tensor{Name: "prompt_tokens", Datatype: "INT64", Shape: []int64{int64(n)}}
	if err := jsonData(&t, raw, nil); err != nil {
		return err
	}
	g.PromptTokens = t.Int64
	return nil
}

// arrayLen is the number of elements of raw, a JSON value the decoder
// has checked, without decoding them; -1 when raw is not an array.
func arrayLen(raw []byte) int {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' {
		return -1
	}
	if len(bytes.TrimSpace(raw[1:len(raw)-1])) == 0 {
		return 0
	}
	n, depth, inString, escaped := 1, 0, false, false
	for _, c := range raw {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 1:
			n++
		}
	}
	return n
}

// firstOf is a unless it is nil, else b.
func firstOf[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}
