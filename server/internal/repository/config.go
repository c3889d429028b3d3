package repository

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"rnnserve/schedule"
)

// Config is a model's optional serving config, config.yaml beside its
// model.yaml in the repository.
type Config struct {
	// Schedule for whole-request plans: auto (default), A, A+ or P (the
	// partitioned schedule, on GOMAXPROCS cores). auto models the traffic
	// of every candidate at the host's cache sizes and picks the fastest
	// (the rule is in docs/api.md, "Health and metadata").
	Schedule string `yaml:"schedule,omitempty"`
	// Precision of the stored recurrent weights: f32 (default), bf16 or
	// int8. bf16 allows P-bf16 (P with bf16 weights, outputs within about
	// 2e-2 of float32), int8 allows P-int8 (int8 weights and dynamically
	// quantized activations, docs/models.md "Precision"): with schedule P
	// it is what runs, with auto it is one more candidate. A and A+ have
	// neither form. When P-int8 runs, batched steps use int8 weights too.
	Precision string `yaml:"precision,omitempty"`
	// Batching overrides the server's batching.enabled for this model.
	Batching *bool `yaml:"batching,omitempty"`
}

// ErrConfig is wrapped by every error about the values of a model's
// config.yaml.
var ErrConfig = errors.New("server: invalid model config")

// MaxConfigBytes bounds a model's config.yaml, which sets at most three
// keys: a larger file is refused unread.
const MaxConfigBytes = 64 << 10

// maxConfigMessage bounds how much of a YAML decoder's message about a
// config.yaml an error repeats (it may quote the file).
const maxConfigMessage = 300

// ParseConfig decodes and validates a config.yaml: one YAML document of
// the keys Config knows, no more than MaxConfigBytes. An unknown key, a
// second document or a value of the wrong type is an error (ErrConfig); an
// empty file, or one of comments only, is every default.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if len(data) > MaxConfigBytes {
		return c, fmt.Errorf("%w: config.yaml has %d bytes, limit %d (MaxConfigBytes)", ErrConfig, len(data), MaxConfigBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	switch err := dec.Decode(&c); {
	case errors.Is(err, io.EOF):
		return Config{}, nil
	case err != nil:
		return Config{}, fmt.Errorf("%w: config.yaml: %s", ErrConfig, clipMessage(err.Error()))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("%w: config.yaml: more than one YAML document", ErrConfig)
	}
	return c, c.Validate()
}

// clipMessage cuts s to maxConfigMessage bytes, between characters.
func clipMessage(s string) string {
	if len(s) <= maxConfigMessage {
		return s
	}
	n := maxConfigMessage
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:n], len(s))
}

// Validate reports the first invalid value, naming config.yaml and its key.
func (c Config) Validate() error {
	_, _, err := c.ParseSchedule()
	return err
}

// ParseSchedule returns the schedule c asks for (0 for auto) and the
// weight precision it allows.
func (c Config) ParseSchedule() (schedule.Schedule, schedule.Precision, error) {
	prec, err := schedule.ParsePrecision(c.Precision)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: config.yaml: precision %q: want f32, bf16 or int8", ErrConfig, c.Precision)
	}
	if c.Schedule == "" || c.Schedule == "auto" {
		return 0, prec, nil
	}
	s, err := schedule.Parse(c.Schedule)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: config.yaml: schedule %q: want auto, A, A+ or P", ErrConfig, c.Schedule)
	}
	if prec != schedule.F32 && s != schedule.Partitioned {
		return 0, 0, fmt.Errorf("%w: config.yaml: precision %v with schedule %v: only P stores %v weights (use schedule P or auto, or precision f32)", ErrConfig, prec, s, prec)
	}
	return s, prec, nil
}
