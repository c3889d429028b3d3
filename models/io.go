package models

import (
	"fmt"
	"slices"

	"rnnserve/rnn"
)

// IO names a sequence model's input and outputs as a client written for
// the exported model expects them (an ONNX graph's own tensor names), and
// lays them out as that model does. Without it a model takes "tokens" or
// "features" and gives rnnserve's outputs (logits, probs, top_k,
// top_k_probs, output, hidden, cell), batch-first.
type IO struct {
	// Input is the name of the token-id or feature input.
	Input string `yaml:"input"`
	// TimeMajor lays the input and every per-step output out [T, B, ...],
	// as PyTorch's batch_first=False; false: [B, T, ...].
	TimeMajor bool `yaml:"time_major,omitempty"`
	// Outputs are the model's outputs by name, in the exported order.
	Outputs []Output `yaml:"outputs"`
}

// Output is one named output: which of the model's values it holds and
// how they are laid out.
type Output struct {
	Name string `yaml:"name"`
	// Value is one of the OutputValues.
	Value string `yaml:"value"`
	// Rows flattens a per-step output's time and batch axes into one,
	// [T*B, X] with rows in the layout's order, as out.reshape(-1, X)
	// before the head gives.
	Rows bool `yaml:"rows,omitempty"`
	// States picks entries of h_n or c_n by their index on its first axis
	// (layer*dirs + direction, counting every layer of the stack); empty:
	// all of them, in order.
	States []int `yaml:"states,omitempty"`
	// Join concatenates the picked states along the features, [B, n*H]
	// as torch.cat((h_n[-2], h_n[-1]), dim=1) gives, instead of stacking
	// them [n, B, H].
	Join bool `yaml:"join,omitempty"`
}

// OutputValues are the values an Output may hold.
var OutputValues = map[string]string{
	"head":   "the head's output after its activation, per step: [B, T, V] ([T, B, V] time-major)",
	"output": "the last layer's output at each step: [B, T, D*H] ([T, B, D*H] time-major)",
	"h_n":    "final hidden states as PyTorch lays them out: [layers*dirs, B, H]",
	"c_n":    "final cell states of the LSTM layers, likewise",
	"none":   "an output of the exported model that rnnserve does not compute: asking for it is refused",
}

// Limits on an io section (real ones have a handful of outputs).
const (
	maxIOOutputs = 256
	maxIOStates  = 4096
	maxIOName    = 256
)

// validateIO checks s.IO against the network shape c, naming the key at fault.
func (s *Spec) validateIO(c rnn.Config) error {
	io := s.IO
	if io == nil {
		return nil
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: io.%s", ErrSpec, fmt.Sprintf(format, a...))
	}
	if err := ioName(io.Input); err != nil {
		return bad("input: %v", err)
	}
	if io.Input == "lengths" {
		return bad(`input: "lengths" is the name of rnnserve's optional lengths input; name the model's input otherwise`)
	}
	if len(io.Outputs) > maxIOOutputs {
		return bad("outputs: %d entries, limit %d", len(io.Outputs), maxIOOutputs)
	}
	layers := c.LayerConfigs()
	var blocks []rnn.LayerConfig // h_n's first axis: one entry per layer and direction
	for _, l := range layers {
		blocks = append(blocks, l)
		if l.Bidirectional {
			blocks = append(blocks, l)
		}
	}
	seen := map[string]bool{io.Input: true, "lengths": true}
	for i, o := range io.Outputs {
		at := func(format string, a ...any) error {
			return bad("outputs[%d] (%.64q): %s", i, o.Name, fmt.Sprintf(format, a...))
		}
		if err := ioName(o.Name); err != nil {
			return at("name: %v", err)
		}
		if seen[o.Name] {
			return at("the name is taken by the input or another output")
		}
		seen[o.Name] = true
		if _, ok := OutputValues[o.Value]; !ok {
			return at("value %.32q, want head, output, h_n, c_n or none", o.Value)
		}
		state := o.Value == "h_n" || o.Value == "c_n"
		switch {
		case o.Value == "head" && c.HeadOut == 0:
			return at("value head, but the model has no head")
		case o.Rows && o.Value != "head" && o.Value != "output":
			return at("rows is for the per-step values head and output")
		case !state && (len(o.States) > 0 || o.Join):
			return at("states and join are for h_n and c_n")
		case len(o.States) > maxIOStates:
			return at("states lists %d entries, limit %d", len(o.States), maxIOStates)
		}
		if !state {
			continue
		}
		picks := o.States
		if len(picks) == 0 {
			picks = make([]int, len(blocks))
			for j := range picks {
				picks[j] = j
			}
		}
		width := -1
		for _, j := range picks {
			if j < 0 || j >= len(blocks) {
				return at("state %d outside h_n's %d entries (layers*dirs)", j, len(blocks))
			}
			l := blocks[j]
			w := l.Hidden
			if o.Value == "h_n" && l.Proj > 0 {
				w = l.Proj
			}
			if o.Value == "c_n" && l.Cell != rnn.LSTM {
				return at("state %d is of a %v layer, which has no cell state", j, l.Cell)
			}
			if width >= 0 && w != width && !o.Join {
				return at("states of widths %d and %d cannot be stacked (set join, or pick states of one module)", width, w)
			}
			width = w
		}
	}
	return nil
}

// ioName checks an input or output name: 1..256 bytes, printable.
func ioName(name string) error {
	if name == "" || len(name) > maxIOName {
		return fmt.Errorf("name of %d bytes, want 1..%d", len(name), maxIOName)
	}
	if slices.ContainsFunc([]rune(name), func(r rune) bool { return r < ' ' || r == 0x7f || r == 0xfffd }) {
		return fmt.Errorf("name %.64q has control characters", name)
	}
	return nil
}
