package models

import (
	"errors"
	"fmt"
	"strings"

	"rnnserve/rnn"
)

// App is one of the four applications whose memory traffic Thakker et
// al., "Measuring scheduling efficiency of RNNs for NLP applications",
// model in Section V-A: GNMT, DeepSpeech1, LM (in two shapes, lm and
// lm-dre) and byteNER. That paper gives only a few sizes (layer counts, vocabularies, byteNER's total);
// the others are chosen here from each application's own paper, and each
// constructor's doc comment says which sizes came from where and what the
// engine simplifies.
type App struct {
	Name  string // the catalog key: gnmt, deepspeech1, lm, lm-dre, bytener
	Title string // what the application is, and its paper
	// Encoder is the recurrent network Schedules A and A+ apply to: the
	// whole model, or GNMT's encoder.
	Encoder Spec
	// Decoder is GNMT's attention decoder, nil for the other apps. It
	// feeds its own output back, so it runs Schedule A's step-by-step
	// products under either schedule (schedule.DecoderProgram).
	Decoder *DecoderSpec
}

// DecoderSpec is the shape of an attention decoder (rnn.Decoder): its
// target vocabulary (embedding rows and softmax outputs), embedding
// width, and recurrent stack. The attention's memory width is the
// encoder's output width.
type DecoderSpec struct {
	Cell       string
	VocabSize  int
	EmbedSize  int
	HiddenSize int
	NumLayers  int
}

// Config converts d to the decoder shape it describes, attending over
// encoder outputs memory values wide.
func (d *DecoderSpec) Config(memory int) (rnn.DecoderConfig, error) {
	cell, err := rnn.ParseCell(d.Cell)
	if err != nil {
		return rnn.DecoderConfig{}, fmt.Errorf("%w: decoder cell: %w", ErrSpec, err)
	}
	return rnn.DecoderConfig{Cell: cell, Vocab: d.VocabSize, Embed: d.EmbedSize, Hidden: d.HiddenSize,
		Layers: d.NumLayers, Memory: memory}, nil
}

// ErrUnknownApp is returned by LookupApp for a name not in the catalog.
var ErrUnknownApp = errors.New("models: unknown application")

// Apps returns the catalog in the paper's order (its LM twice: as
// Jozefowicz et al. built it, then as the DRE paper describes it). Each
// call returns fresh values, which the caller may change.
func Apps() []App { return []App{GNMT(), DeepSpeech1(), LM(), LMDRE(), ByteNER()} }

// AppNames lists the catalog's keys in the paper's order.
func AppNames() []string {
	var names []string
	for _, a := range Apps() {
		names = append(names, a.Name)
	}
	return names
}

// LookupApp returns the application named name (case-insensitive).
func LookupApp(name string) (App, error) {
	for _, a := range Apps() {
		if strings.EqualFold(a.Name, name) {
			return a, nil
		}
	}
	return App{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownApp, name, strings.Join(AppNames(), ", "))
}

// Shape returns the app's dry networks: the encoder, and the decoder (nil
// without one) attending over the encoder's outputs.
func (a App) Shape() (*rnn.Network, *rnn.Decoder, error) {
	enc, err := Shape(&a.Encoder)
	if err != nil {
		return nil, nil, fmt.Errorf("app %s: %w", a.Name, err)
	}
	if a.Decoder == nil {
		return enc, nil, nil
	}
	cfg, err := a.Decoder.Config(enc.OutputWidth())
	if err != nil {
		return nil, nil, fmt.Errorf("app %s: %w", a.Name, err)
	}
	dec, err := rnn.NewDecoder(cfg, true)
	if err != nil {
		return nil, nil, fmt.Errorf("app %s: %w: %w", a.Name, ErrSpec, err)
	}
	return enc, dec, nil
}

// WeightBytes is the size of all the app's parameters (float32):
// embeddings, recurrent layers, heads and attention.
func (a App) WeightBytes() (int64, error) {
	enc, dec, err := a.Shape()
	if err != nil {
		return 0, err
	}
	n := enc.WeightBytes()
	if dec != nil {
		n += dec.WeightBytes()
	}
	return n, nil
}

// GNMT is Google's Neural Machine Translation system (Wu et al., "Google's
// Neural Machine Translation System: Bridging the Gap between Human and
// Machine Translation", arXiv:1609.08144, 2016).
//
//   - From the DRE paper: 8 encoder and 8 decoder layers with attention,
//     a vocabulary of 80,000 (GNMT's own wordpiece vocabularies are
//     smaller).
//   - From Wu et al.: LSTM layers of 1024 units; we make the embeddings
//     1024 wide too, so every encoder layer's G is [2048][4096].
//   - Simplified: GNMT's bottom encoder layer is bidirectional; ours is
//     forward only (the encoder reads one direction's G per step at its
//     bottom layer). The catalog predates mixed stacks (Spec.Layers), which
//     could express that layer; changing it changes GNMT's traffic, so it
//     is left for a change of its own. Residual
//     connections (no weights) are left out. GNMT's attention is a small
//     feed-forward network whose context feeds every decoder layer; ours
//     is Luong's "general" attention with input feeding into the bottom
//     decoder layer (rnn.Attention), the softmax head reads the
//     attentional vector, and decoding is greedy (GNMT uses beam search).
//   - The decoder produces as many tokens as the input has.
func GNMT() App {
	return App{
		Name:  "gnmt",
		Title: "GNMT translation (Wu et al. 2016): 8 LSTM encoder + 8 decoder layers of 1024, attention, 80k vocabulary",
		Encoder: Spec{Cell: "lstm", InputSize: 1024, HiddenSize: 1024, NumLayers: 8,
			Embedding: &Embedding{VocabSize: 80000}},
		Decoder: &DecoderSpec{Cell: "lstm", VocabSize: 80000, EmbedSize: 1024, HiddenSize: 1024, NumLayers: 8},
	}
}

// DeepSpeech1 is Baidu's Deep Speech (Hannun et al., "Deep Speech: Scaling
// up end-to-end speech recognition", arXiv:1412.5567, 2014).
//
//   - From the DRE paper: 5 RNN layers and a vocabulary of 28 (the
//     characters a-z, space and apostrophe): a softmax head of 28 on every
//     time step.
//   - From Hannun et al.: the recurrent layer is bidirectional, and the
//     input is feature frames with C frames of context on each side (C
//     in {5, 7, 9}), not tokens. We feed 494 features per step, 26 MFCC
//     coefficients x 19 frames (C = 9), as the open-source re-implementation
//     of Deep Speech does, and make every layer 2048 units per direction
//     (the width that re-implementation uses).
//   - Simplified: Deep Speech has one bidirectional recurrent layer among
//     four non-recurrent (clipped ReLU) layers; following the DRE paper's
//     "5 RNN layers" we model five bidirectional LSTM layers, the cell of
//     the paper's own benchmarks (Deep Speech's plain recurrent cell is
//     the engine's rnn_relu, with a quarter of an LSTM's weights), and
//     leave the dense layers out.
func DeepSpeech1() App {
	return App{
		Name:  "deepspeech1",
		Title: "Deep Speech speech recognition (Hannun et al. 2014): 5 bidirectional LSTM layers of 2048, 494 features, 28 characters",
		Encoder: Spec{Cell: "lstm", InputSize: 494, HiddenSize: 2048, NumLayers: 5, Bidirectional: true,
			Head: &Head{OutFeatures: 28, Activation: "softmax", Input: "every_step"}},
	}
}

// LM is the large LSTM language model of Jozefowicz et al., "Exploring the
// Limits of Language Modeling", arXiv:1602.02410, 2016.
//
//   - From the DRE paper: 2 LSTM layers and a vocabulary of 80,000 (the
//     One Billion Word benchmark's own vocabulary is about 800,000).
//   - From Jozefowicz et al.: LSTM-8192-2048, cells of 8192 units with a
//     recurrent projection to 2048; we make the word embedding 2048 wide,
//     so both layers see 2048 inputs and W_ih and W_hh are each
//     [32768][2048] (256 MiB), with W_hr [2048][8192] (64 MiB).
//   - The DRE paper's own LM is shaped differently: a 2048-unit layer
//     and an 8192-unit layer without projection; that model is LMDRE.
func LM() App {
	return App{
		Name:  "lm",
		Title: "LSTM language model (Jozefowicz et al. 2016): 2 layers LSTM-8192-2048, 80k vocabulary",
		Encoder: Spec{Cell: "lstm", InputSize: 2048, HiddenSize: 8192, ProjSize: 2048, NumLayers: 2,
			Embedding: &Embedding{VocabSize: 80000}, Head: &Head{OutFeatures: 80000, Activation: "softmax"}},
	}
}

// LMDRE is the language model as the DRE paper describes it in Section
// V-B: "LM uses cells of size 2,048 for one layer and 8,192 for the
// other", LSTM layers without projection, a vocabulary of 80,000 (Section
// V-A), and a first layer whose G1 and G2 are "equally sized" and a second
// whose input weights are "2048x8192" (so the embedding is 2048 wide, and
// both layers read 2048 inputs). As in the paper's own benchmarks
// ("embeddings are present in the first and the last layers"), the
// vocabulary is both the embedding's rows and the softmax head's outputs,
// and the head reads the 8192 values of the top layer.
//
//   - Sizes: layer 1's W_ih and W_hh are each [8192][2048] (64 MiB), layer
//     2's W_ih [32768][2048] (256 MiB) and W_hh [32768][8192] (1 GiB); the
//     embedding is 625 MiB and the head [80000][8192] 2500 MiB.
//   - The paper's G of "96 MB" and "960 MB" are three gate blocks of
//     these layers rather than an LSTM's four; every G of the model scales
//     alike, so the recurrent layers' A+/A traffic ratio does not depend
//     on the gate count.
//   - It is a mixed stack (two RNN modules of different sizes), so it
//     lists its layers (Spec.Layers) where the other apps give one size.
func LMDRE() App {
	return App{
		Name:  "lm-dre",
		Title: "LSTM language model as the DRE paper describes it (Section V-B): layers of 2048 and 8192 cells, no projection, 80k vocabulary",
		Encoder: Spec{InputSize: 2048,
			Layers:    []LayerSpec{{Cell: "lstm", HiddenSize: 2048, NumLayers: 1}, {Cell: "lstm", HiddenSize: 8192, NumLayers: 1}},
			Embedding: &Embedding{VocabSize: 80000}, Head: &Head{OutFeatures: 80000, Activation: "softmax"}},
	}
}

// ByteNER is the Byte-to-Span named-entity recogniser of Gillick et al.,
// "Multilingual Language Processing From Bytes", arXiv:1512.00103, 2015.
//
//   - From the DRE paper: 4 RNN layers, "a vocabulary of size 4", and a
//     network of 9.4 MB in all.
//   - From Gillick et al.: the model is an LSTM stack reading UTF-8
//     bytes, so the input embedding has 256 rows.
//   - Chosen: the width. With 4 LSTM layers of 272 units (embedding 272
//     wide, so every layer's G is [544][1088]) and a softmax head of 4,
//     the parameters total 9.33 MiB (9.79 MB), the paper's "9.4 MB".
//   - Simplified: Byte-to-Span reads the input and then emits spans,
//     feeding each prediction back; as in the DRE paper we model the
//     4-layer stack over the input only.
func ByteNER() App {
	return App{
		Name:  "bytener",
		Title: "Byte-to-Span NER (Gillick et al. 2015): 4 LSTM layers of 272 over bytes, 9.3 MiB",
		Encoder: Spec{Cell: "lstm", InputSize: 272, HiddenSize: 272, NumLayers: 4,
			Embedding: &Embedding{VocabSize: 256}, Head: &Head{OutFeatures: 4, Activation: "softmax"}},
	}
}
