package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/internal/infer"
	"rnnserve/server/internal/wire"
)

// GenerateRequest and GenerateToken are package infer's, beside Request.
type (
	GenerateRequest = infer.GenerateRequest
	GenerateToken   = infer.GenerateToken
)

// GenerateResult is how a generation ended.
type GenerateResult struct {
	Tokens int
	// Reason is "length" (MaxTokens reached), "stop" (a stop string was
	// generated), "canceled" (the client went away after the first
	// token) or "error" (Err cut it short after the first token).
	Reason string
	// Err is what cut the generation short after its first token: ErrCut
	// (the drain timeout), ErrInternal (a panic). A transport streaming
	// the tokens ends the stream with it.
	Err error
	// t is where the generation's time went, for the statistics: its
	// wait for a lane (queue) and its steps (compute).
	t timing
}

// defaultMaxTokens is MaxTokens when a request leaves it 0 (or
// max_generate_tokens, when that is less).
const defaultMaxTokens = 64

// generation is the sampling state of a generate request; the lane that
// runs its row owns it.
type generation struct {
	maxTokens   int
	temperature float64
	topK        int
	topP        float64
	rng         *rand.Rand
	produced    int
	events      chan GenerateToken // buffered for maxTokens: never blocks
	scratch     []float64
	probs       []float32
	masked      []float32
	order       []int
	stopped     atomic.Bool // set by the handler when a stop string appeared
}

// sample draws the next token from a head row of log-probabilities (or
// the model's activation), after the top-p cut when one is set.
func (g *generation) sample(logp []float32) int {
	if g.topP > 0 && g.topP < 1 && g.temperature > 0 {
		logp = g.nucleus(logp)
	}
	return rnn.Sample(logp, g.temperature, g.topK, g.rng, g.scratch)
}

// nucleus returns logp with every token outside the top-p set (the fewest
// most likely tokens whose tempered probabilities add up to at least
// topP) set to -Inf, for rnn.Sample to skip.
func (g *generation) nucleus(logp []float32) []float32 {
	V := len(logp)
	if g.order == nil {
		g.order = make([]int, V)
		g.masked = make([]float32, V)
	}
	mx := math.Inf(-1)
	for _, v := range logp {
		mx = max(mx, float64(v))
	}
	var sum float64
	for i, v := range logp {
		g.scratch[i] = math.Exp((float64(v) - mx) / g.temperature)
		sum += g.scratch[i]
		g.order[i] = i
	}
	slices.SortFunc(g.order, func(a, b int) int {
		switch {
		case g.scratch[a] > g.scratch[b]:
			return -1
		case g.scratch[a] < g.scratch[b]:
			return 1
		}
		return a - b
	})
	for i := range g.masked {
		g.masked[i] = float32(math.Inf(-1))
	}
	acc := 0.0
	for _, i := range g.order {
		g.masked[i] = logp[i]
		if acc += g.scratch[i] / sum; acc >= g.topP {
			break
		}
	}
	return g.masked
}

// checkGenerate validates a generate request against a sequence model
// and returns its prompt as token ids.
func (m *seqModel) checkGenerate(g *GenerateRequest) ([]int64, error) {
	n := m.net
	if n.Vocab == 0 || n.HeadOut != n.Vocab || !n.Unidirectional() {
		return nil, fmt.Errorf("%w: %q needs token input, a head over its vocabulary and one direction", ErrNotLanguageModel, m.name)
	}
	var ids []int64
	switch {
	case len(g.Prompt) > 0 && g.PromptTokens != nil:
		return nil, infer.BadRequest("give a text prompt or prompt_tokens, not both")
	case len(g.Prompt) > 0:
		if n.Vocab != 256 {
			return nil, infer.BadRequest("a text prompt needs a byte-level model (vocabulary 256); send prompt_tokens")
		}
		if len(g.Prompt) > m.opts.MaxSteps { // before its ids take 8 bytes a byte
			return nil, infer.BadRequest("prompt of %d tokens exceeds max_steps %d", len(g.Prompt), m.opts.MaxSteps)
		}
		if err := checkUTF8("the text prompt", g.Prompt); err != nil {
			return nil, err
		}
		ids = make([]int64, len(g.Prompt))
		for i, b := range g.Prompt {
			ids[i] = int64(b)
		}
	default:
		ids = g.PromptTokens
		for i, id := range ids {
			if id < 0 || id >= int64(n.Vocab) {
				return nil, infer.BadRequest("prompt_tokens[%d] = %d is outside the vocabulary [0, %d)", i, id, n.Vocab)
			}
		}
	}
	if len(ids) == 0 {
		return nil, infer.BadRequest("empty prompt")
	}
	if len(ids) > m.opts.MaxSteps {
		return nil, infer.BadRequest("prompt of %d tokens exceeds max_steps %d", len(ids), m.opts.MaxSteps)
	}
	if g.MaxTokens == 0 {
		g.MaxTokens = min(defaultMaxTokens, m.opts.MaxGenerateTokens)
	}
	switch {
	case g.MaxTokens < 1 || g.MaxTokens > m.opts.MaxGenerateTokens:
		return nil, infer.BadRequest("max_tokens %d, want 1..%d", g.MaxTokens, m.opts.MaxGenerateTokens)
	case math.IsNaN(g.Temperature) || g.Temperature < 0 || g.Temperature > 100:
		return nil, infer.BadRequest("temperature %v, want 0..100 (0 is greedy)", g.Temperature)
	case g.TopK < 0 || g.TopK > n.Vocab:
		return nil, infer.BadRequest("top_k %d, want 0..%d (0 keeps all)", g.TopK, n.Vocab)
	case math.IsNaN(g.TopP) || g.TopP < 0 || g.TopP > 1:
		return nil, infer.BadRequest("top_p %v, want 0..1 (0 or 1 keeps all)", g.TopP)
	case len(g.Stop) > 16:
		return nil, infer.BadRequest("%d stop strings, want at most 16", len(g.Stop))
	}
	for i, s := range g.Stop {
		if len(s) == 0 || len(s) > 256 {
			return nil, infer.BadRequest("stop[%d]: %d bytes, want 1..256", i, len(s))
		}
		if err := checkUTF8(fmt.Sprintf("stop[%d]", i), s); err != nil {
			return nil, err
		}
	}
	if len(g.Stop) > 0 && n.Vocab != 256 {
		return nil, infer.BadRequest("stop strings need a byte-level model (vocabulary 256)")
	}
	return ids, nil
}

// generate runs a generation as one row of the cellular batcher, emitting
// each token as the lane produces it. It returns an error only when it
// failed before the first token was emitted.
func (m *seqModel) generate(ctx context.Context, g *GenerateRequest, emit func(GenerateToken) error) (GenerateResult, error) {
	prompt, err := m.checkGenerate(g)
	if err != nil {
		return GenerateResult{}, err
	}
	V := m.net.Vocab
	if err := g.Charge(generationBytes(len(prompt), g.MaxTokens, V)); err != nil {
		return GenerateResult{}, err
	}
	gen := &generation{maxTokens: g.MaxTokens, temperature: g.Temperature, topK: g.TopK, topP: g.TopP,
		rng: rand.New(rand.NewPCG(g.Seed, 0x5eed)), events: make(chan GenerateToken, g.MaxTokens),
		scratch: make([]float64, V), probs: make([]float32, V)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	j := &job[*seqWork]{ctx: ctx, rows: 1,
		work: &seqWork{gen: gen, seqs: []*schedule.Sequence{{Tokens: prompt, Head: schedule.HeadLast}}}}
	if err := m.batch.submit(j); err != nil {
		return GenerateResult{}, err
	}
	res := GenerateResult{Reason: "length"}
	var text []byte
	handle := func(tok GenerateToken) {
		if res.Reason != "length" {
			return // stopped or the client went away: drop what follows
		}
		if V == 256 {
			tok.Text = []byte{byte(tok.Token)}
			text = append(text, tok.Text...)
		}
		if err := emit(tok); err != nil {
			res.Reason = "canceled"
			cancel() // the lane drops the row at its next step
			return
		}
		res.Tokens++
		for _, s := range g.Stop {
			if bytes.HasSuffix(text, s) {
				res.Reason = "stop"
				gen.stopped.Store(true)
				break
			}
		}
	}
	var done error
	for finished := false; !finished; {
		select {
		case tok := <-gen.events:
			handle(tok)
		case done = <-j.done:
			finished = true
		}
	}
	if g.Generated != nil {
		g.Generated()
	}
	for drained := false; !drained; { // the lane sends every token before done
		select {
		case tok := <-gen.events:
			handle(tok)
		default:
			drained = true
		}
	}
	if done != nil && res.Tokens == 0 && res.Reason == "length" {
		return GenerateResult{}, done
	}
	res.t = timing{queue: j.started.Sub(j.enqueued), compute: j.finished.Sub(j.started)}
	if done != nil && res.Reason == "length" {
		res.Reason = "canceled"
		if !errors.Is(done, context.Canceled) { // not the client going away
			res.Reason, res.Err = "error", done
		}
	}
	return res, nil
}

// generationBytes is the memory a generation of maxTokens tokens from a
// prompt of n tokens over a vocabulary of V holds while it lasts, taken
// from the memory budget before it starts: the prompt's ids, its tokens
// twice (waiting in the events channel, then in the transport's copy: a
// whole answer's list, a stream's pending message) with their text, and
// the sampler's rows (generation: scratch, probs, and top-p's masked and
// order). A generation of the largest max_generate_tokens (2^20) holds
// about 100 MiB, which the budget now sees.
func generationBytes(n, maxTokens, V int) int64 {
	token := int64(unsafe.Sizeof(GenerateToken{})) + 1
	return 8*int64(n) + 2*token*int64(maxTokens) + int64(V)*(8+4+4+8)
}

// checkUTF8 refuses text that is not UTF-8 (gRPC's BYTES text_input and
// stop strings; REST's JSON text is checked as it is read).
func checkUTF8(what string, b []byte) error {
	if utf8.Valid(b) {
		return nil
	}
	return infer.BadRequest("%s is not valid UTF-8 at byte %d", what, wire.InvalidAt(b))
}
