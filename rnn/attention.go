package rnn

import (
	"fmt"

	"rnnserve/internal/hugepage"
)

// Attention holds the weights of Luong et al.'s "general" attention with
// their attentional output layer (Luong, Pham and Manning, "Effective
// Approaches to Attention-based Neural Machine Translation", EMNLP 2015,
// Sections 3 and 3.1). For a decoder state h [Query] and the S encoder
// outputs e_s [Memory]:
//
//	q   = W_a h                  the query, [Memory]: score(h, e_s) = e_sᵀ W_a h
//	a   = softmax_s(e_s · q)     one weight per encoder output
//	ctx = Σ_s a_s e_s            the context, [Memory]
//	h̃   = tanh(W_c [ctx; h])     the attentional vector, [Query]
//
// Weights are row-major and without biases, as in the paper:
// Wa [Memory][Query] and Wc [Query][Memory+Query].
type Attention struct {
	Query  int // width of the decoder state h and of h̃
	Memory int // width of one encoder output
	Wa     []float32
	Wc     []float32
}

// WeightBytes is the size of the attention's parameters in bytes.
func (a *Attention) WeightBytes() int64 {
	return 4 * (int64(a.Memory)*int64(a.Query) + int64(a.Query)*int64(a.Memory+a.Query))
}

// Argmax is the index of the largest value of row, the lowest on ties. A
// NaN is never larger than anything.
func Argmax(row []float32) int {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return best
}

// DecoderConfig is the shape of a Decoder.
type DecoderConfig struct {
	Cell   CellKind
	Vocab  int // target vocabulary: embedding rows and head outputs
	Embed  int // embedding width
	Hidden int
	Layers int
	Memory int // width of the encoder outputs attended over
}

// Decoder is a recurrent decoder with attention and input feeding (Luong
// et al., Section 3.3): at every output step layer 0 reads the embedding
// of the previous token beside the previous step's attentional vector h̃,
// the stack runs one step, the top layer's state attends over the encoder
// outputs, and the head turns h̃ into log-probabilities over the vocabulary.
type Decoder struct {
	Vocab     int
	Embed     int
	Embedding []float32 // [Vocab][Embed]
	// Stack is the recurrent layers and the head: layer 0's input is
	// Embed+Hidden wide ([embedding; h̃]), the head maps h̃ to Vocab
	// log-probabilities. Its own Vocab is 0: the embedding is above.
	Stack *Network
	Attn  *Attention
}

// NewDecoder builds a decoder of the given shape, with every weight slice
// allocated (zero) unless dry is set.
func NewDecoder(cfg DecoderConfig, dry bool) (*Decoder, error) {
	bad := func(field string, v int) error {
		return fmt.Errorf("%w: decoder %s = %d, want 1..%d", ErrShape, field, v, maxDim)
	}
	switch {
	case cfg.Vocab < 1 || cfg.Vocab > maxDim:
		return nil, bad("vocab", cfg.Vocab)
	case cfg.Embed < 1 || cfg.Embed > maxDim:
		return nil, bad("embed", cfg.Embed)
	case cfg.Memory < 1 || cfg.Memory > maxDim:
		return nil, bad("memory", cfg.Memory)
	case cfg.Hidden < 1 || cfg.Hidden > maxDim:
		return nil, bad("hidden", cfg.Hidden)
	}
	if int64(cfg.Vocab)*int64(cfg.Embed) > 1<<34 || int64(cfg.Hidden)*int64(cfg.Memory+cfg.Hidden) > 1<<34 {
		return nil, fmt.Errorf("%w: a decoder weight matrix has more than 2^34 elements", ErrShape)
	}
	stack, err := NewNetwork(Config{Cell: cfg.Cell, Input: cfg.Embed + cfg.Hidden, Hidden: cfg.Hidden,
		Layers: cfg.Layers, HeadOut: cfg.Vocab, Activation: ActLogSoftmax}, dry)
	if err != nil {
		return nil, err
	}
	// The embedding and attention matrices belong to the stack's arena
	// (Decoder.Memory) beside its own.
	alloc := func(k int) []float32 {
		if dry {
			return nil
		}
		return stack.mem.Floats(k)
	}
	return &Decoder{
		Vocab: cfg.Vocab, Embed: cfg.Embed, Embedding: alloc(cfg.Vocab * cfg.Embed),
		Stack: stack,
		Attn: &Attention{Query: cfg.Hidden, Memory: cfg.Memory,
			Wa: alloc(cfg.Memory * cfg.Hidden), Wc: alloc(cfg.Hidden * (cfg.Memory + cfg.Hidden))},
	}, nil
}

// Memory is the arena that owns the decoder's large matrices, its
// stack's (Network.Memory).
func (d *Decoder) Memory() *hugepage.Arena { return d.Stack.Memory() }

// Dry reports whether the decoder has shapes but no weights.
func (d *Decoder) Dry() bool { return d.Stack.Dry() }

// WeightBytes is the size of all of d's parameters in bytes: embedding,
// stack, head and attention.
func (d *Decoder) WeightBytes() int64 {
	return 4*int64(d.Vocab)*int64(d.Embed) + d.Stack.WeightBytes() + d.Attn.WeightBytes()
}
