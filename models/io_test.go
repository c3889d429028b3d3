package models

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// ioSpec is a two-module stack (a bidirectional LSTM with projection,
// then a GRU) with a head, so that h_n has entries of two widths and
// c_n exists for some of them only.
const ioSpec = `
input_size: 3
layers:
  - {cell: lstm, hidden_size: 6, proj_size: 4, bidirectional: true}
  - {cell: gru, hidden_size: 5}
embedding: {vocab_size: 9}
head: {out_features: 7}
`

func TestParseSpecIO(t *testing.T) {
	doc := ioSpec + `io:
  input: input_ids
  time_major: true
  outputs:
    - {name: output, value: head}
    - {name: out_rows, value: output, rows: true}
    - {name: h_lstm, value: h_n, states: [0, 1]}
    - {name: c_lstm, value: c_n, states: [0, 1]}
    - {name: hcat, value: h_n, states: [1, 2], join: true}
    - {name: odd, value: none}
`
	s, err := ParseSpec([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := &IO{Input: "input_ids", TimeMajor: true, Outputs: []Output{
		{Name: "output", Value: "head"}, {Name: "out_rows", Value: "output", Rows: true},
		{Name: "h_lstm", Value: "h_n", States: []int{0, 1}}, {Name: "c_lstm", Value: "c_n", States: []int{0, 1}},
		{Name: "hcat", Value: "h_n", States: []int{1, 2}, Join: true}, {Name: "odd", Value: "none"},
	}}
	if !reflect.DeepEqual(s.IO, want) {
		t.Errorf("io %+v, want %+v", s.IO, want)
	}
}

func TestParseSpecIOErrors(t *testing.T) {
	for _, c := range []struct{ io, want string }{
		{"io: {input: '', outputs: []}", "io.input: name of 0 bytes"},
		{"io: {input: lengths, outputs: []}", `"lengths" is the name`},
		{"io: {input: x, outputs: [{name: x, value: head}]}", "taken by the input"},
		{"io: {input: x, outputs: [{name: y, value: head}, {name: y, value: output}]}", "outputs[1]"},
		{"io: {input: x, outputs: [{name: y, value: logits}]}", `value "logits"`},
		{"io: {input: x, outputs: [{name: y, value: h_n, states: [3]}]}", "state 3 outside h_n's 3 entries"},
		{"io: {input: x, outputs: [{name: y, value: h_n, states: [-1]}]}", "state -1"},
		{"io: {input: x, outputs: [{name: y, value: c_n, states: [2]}]}", "gru layer, which has no cell state"},
		{"io: {input: x, outputs: [{name: y, value: h_n}]}", "widths 4 and 5 cannot be stacked"},
		{"io: {input: x, outputs: [{name: y, value: h_n, rows: true}]}", "rows is for"},
		{"io: {input: x, outputs: [{name: y, value: output, join: true}]}", "states and join are for"},
		{"io: {input: \"a\\x01\", outputs: []}", "control characters"},
	} {
		_, err := ParseSpec([]byte(ioSpec + c.io + "\n"))
		if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrSpec mentioning %q", c.io, err, c.want)
		}
	}
	// A head value needs a head.
	_, err := ParseSpec([]byte("cell: gru\ninput_size: 2\nhidden_size: 3\nio: {input: x, outputs: [{name: y, value: head}]}\n"))
	if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "no head") {
		t.Errorf("head value without a head: %v", err)
	}
}
