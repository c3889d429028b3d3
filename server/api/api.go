// Package api holds the JSON wire types of rnnserve's HTTP API: the KServe
// v2 inference protocol (the "Open Inference Protocol" that Triton and
// KServe speak) and rnnserve's extensions. It has no logic beyond
// decoding tensor data.
package api

import "encoding/json"

// ServerMetadata answers GET /v2.
type ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// TensorMetadata describes one input or output of a model.
type TensorMetadata struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"` // -1 for a dimension of any size
	Doc      string  `json:"doc,omitempty"`
}

// ModelMetadata answers GET /v2/models/{name}. Name through Outputs are
// the KServe v2 fields; RNN carries rnnserve's own.
type ModelMetadata struct {
	Name     string           `json:"name"`
	Versions []string         `json:"versions"`
	Platform string           `json:"platform"`
	Inputs   []TensorMetadata `json:"inputs"`
	Outputs  []TensorMetadata `json:"outputs"`
	RNN      RNNMetadata      `json:"rnn"`
}

// RNNMetadata is what rnnserve says of a model beyond KServe v2: its shape,
// the schedule it runs and why, and what it costs in memory traffic.
type RNNMetadata struct {
	Cell          string `json:"cell"`
	InputSize     int    `json:"input_size"`
	HiddenSize    int    `json:"hidden_size"`
	NumLayers     int    `json:"num_layers"`
	Bidirectional bool   `json:"bidirectional"`
	ProjSize      int    `json:"proj_size,omitempty"`
	VocabSize     int    `json:"vocab_size,omitempty"`
	HeadSize      int    `json:"head_size,omitempty"`
	Activation    string `json:"activation,omitempty"`
	WeightBytes   int64  `json:"weight_bytes"`

	Schedule       string `json:"schedule"`        // A, A+, P or P-bf16: for whole-request plans
	ScheduleReason string `json:"schedule_reason"` // why that schedule
	// WideCores, when set, is how many cores a request that finds every
	// core of the model free runs the schedule across (P only).
	WideCores int  `json:"wide_cores,omitempty"`
	Batching  bool `json:"cellular_batching"`

	Traffic []ScheduleTraffic `json:"traffic,omitempty"` // modelled per candidate schedule
}

// ScheduleTraffic is the modelled memory traffic of one schedule at the
// host's cache sizes, for a batch-1 reference input of Steps steps.
type ScheduleTraffic struct {
	Schedule  string `json:"schedule"`            // A, A+, P, P-bf16 or cellular
	Precision string `json:"precision,omitempty"` // of the stored recurrent weights: f32 or bf16
	Workers   int    `json:"workers,omitempty"`   // cores one inference runs on

	CacheBytes      int64   `json:"cache_bytes"` // the last-level cache modelled
	Steps           int     `json:"steps"`
	WorkingSetBytes int64   `json:"working_set_bytes"`
	DRAMBytes       float64 `json:"dram_bytes_per_inference"` // averaged over 100 back-to-back inferences, the first cold
	DRE             float64 `json:"dre"`                      // DRAMBytes / WorkingSetBytes
	// WarmDRAMBytes is DRAMBytes without the cold first inference: what
	// each request costs a server that has served one before.
	WarmDRAMBytes float64 `json:"warm_dram_bytes_per_inference"`

	// PrivateCacheBytes is the size of one core's private cache (L2)
	// modelled, and CoreBytes the bytes the busiest core reads and writes
	// beyond it per warm inference (each core replays its own steps; A
	// and A+ run on one). Absent for cellular, which is not modelled per
	// core.
	PrivateCacheBytes int64    `json:"private_cache_bytes,omitempty"`
	CoreBytes         *float64 `json:"core_bytes_per_inference,omitempty"`
}

// Tensor is an input or output tensor. Data is a flat (or nested) JSON
// array in row-major order: numbers for INT*/FP*, strings for BYTES.
type Tensor struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters Parameters      `json:"parameters,omitempty"`
	Data       json.RawMessage `json:"data"`
}

// Parameters are free-form request, tensor or output parameters.
type Parameters map[string]json.RawMessage

// RequestedOutput names an output the client wants, with its parameters
// (for example {"name": "top_k", "parameters": {"k": 5}}).
type RequestedOutput struct {
	Name       string     `json:"name"`
	Parameters Parameters `json:"parameters,omitempty"`
}

// InferRequest is the body of POST /v2/models/{name}/infer. Request
// parameters rnnserve reads: sequence_id (string or unsigned integer),
// sequence_start, sequence_end (booleans).
type InferRequest struct {
	ID         string            `json:"id,omitempty"`
	Parameters Parameters        `json:"parameters,omitempty"`
	Inputs     []Tensor          `json:"inputs"`
	Outputs    []RequestedOutput `json:"outputs,omitempty"`
}

// OutputTensor is one tensor of an InferResponse.
type OutputTensor struct {
	Name     string  `json:"name"`
	Shape    []int64 `json:"shape"`
	Datatype string  `json:"datatype"`
	Data     any     `json:"data"`
}

// InferResponse answers an InferRequest.
type InferResponse struct {
	ModelName    string         `json:"model_name"`
	ModelVersion string         `json:"model_version,omitempty"`
	ID           string         `json:"id,omitempty"`
	Parameters   map[string]any `json:"parameters,omitempty"`
	Outputs      []OutputTensor `json:"outputs"`
}

// GenerateRequest is the body of POST /v2/models/{name}/generate.
type GenerateRequest struct {
	Prompt      string  `json:"prompt"`
	MaxTokens   int     `json:"max_tokens"`
	Temperature float64 `json:"temperature"`
	TopK        int     `json:"top_k"`
	Seed        uint64  `json:"seed"`
	// PromptTokens replaces Prompt for models whose vocabulary is not bytes.
	PromptTokens []int64 `json:"prompt_tokens,omitempty"`
}

// GenerateEvent is one line of the NDJSON stream that answers a
// GenerateRequest: a generated token (Done false), or, last, a
// GenerateDone line.
type GenerateEvent struct {
	Index   int     `json:"index"`
	Token   int64   `json:"token"`
	Text    string  `json:"text"`
	LogProb float64 `json:"logprob"`
	Done    bool    `json:"done,omitempty"`
	Reason  string  `json:"finish_reason,omitempty"`
}

// GenerateDone is the last line of a generate stream.
type GenerateDone struct {
	Done   bool   `json:"done"`          // always true
	Tokens int    `json:"tokens"`        // tokens generated
	Reason string `json:"finish_reason"` // length: max_tokens reached; canceled: stopped early
}

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
}

// ModelStats answers GET /v2/models/{name}/stats.
type ModelStats struct {
	Name           string        `json:"name"`
	Requests       int64         `json:"requests"`
	Success        int64         `json:"success"`
	Failed         int64         `json:"failed"`
	Rejected       int64         `json:"rejected"`
	Steps          int64         `json:"steps"`
	Tokens         int64         `json:"tokens"`
	LiveSequences  int           `json:"live_sequences"`
	InFlight       int64         `json:"in_flight"`
	QueueLength    int           `json:"queue_length"`
	MeanBatchRows  float64       `json:"mean_batch_rows"`
	QueueSeconds   DurationStats `json:"queue_seconds"`
	ComputeSeconds DurationStats `json:"compute_seconds"`
	TotalSeconds   DurationStats `json:"request_seconds"`
}

// DurationStats summarises durations in seconds.
type DurationStats struct {
	Count int64   `json:"count"`
	Sum   float64 `json:"sum"`
	Mean  float64 `json:"mean"`
}
