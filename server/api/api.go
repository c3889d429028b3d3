// Package api holds the JSON wire types of rnnserve's REST API: the KServe
// v2 inference protocol (the "Open Inference Protocol" that Triton and
// KServe speak), Triton's extensions to it (binary tensor data,
// statistics, model repository, model configuration, generate) and
// rnnserve's own additions, each under a key of its own ("rnn",
// "rnnserve"). It has no logic.
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
	// HeadInput is where the head reads: every_step (logits [B, T, V]),
	// last_step or h_n (logits [B, V], one row per sequence).
	HeadInput   string `json:"head_input,omitempty"`
	WeightBytes int64  `json:"weight_bytes"`
	// Layers, for a stack of layers that differ (several RNN modules in
	// sequence), lists every layer bottom first; Cell through ProjSize
	// above are then the last layer's.
	Layers []LayerMetadata `json:"layers,omitempty"`

	Schedule       string `json:"schedule"`        // A, A+, P, P-bf16 or P-int8: for whole-request plans
	ScheduleReason string `json:"schedule_reason"` // why that schedule
	// WideCores, when set, is how many cores a request that finds every
	// core of the model free runs the schedule across (P only).
	WideCores int  `json:"wide_cores,omitempty"`
	Batching  bool `json:"cellular_batching"`

	Traffic []ScheduleTraffic `json:"traffic,omitempty"` // modelled per candidate schedule
}

// LayerMetadata is one layer of a mixed stack.
type LayerMetadata struct {
	Cell          string `json:"cell"`
	HiddenSize    int    `json:"hidden_size"`
	ProjSize      int    `json:"proj_size,omitempty"`
	Bidirectional bool   `json:"bidirectional"`
}

// ScheduleTraffic is the modelled memory traffic of one schedule at the
// host's cache sizes, for a batch-1 reference input of Steps steps.
type ScheduleTraffic struct {
	Schedule  string `json:"schedule"`            // A, A+, P, P-bf16, P-int8 or cellular
	Precision string `json:"precision,omitempty"` // of the stored recurrent weights: f32, bf16 or int8
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

	// MeasuredSeconds is the median time of one such inference on this
	// host, timed at load (schedule_timing); absent for the candidates
	// that were not timed.
	MeasuredSeconds *float64 `json:"measured_seconds,omitempty"`
	// MeasuredRuns is how many runs the median is of.
	MeasuredRuns int `json:"measured_runs,omitempty"`
}

// RawData is a JSON value kept as the bytes it was decoded from, without
// the copy json.RawMessage makes: the slice points into the decoder's
// buffer and is valid only until the decoder reads again. The REST
// decoder converts it to typed tensor data before that.
type RawData []byte

// UnmarshalJSON keeps the value's bytes without copying them.
func (r *RawData) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// Tensor is an input tensor of an InferRequest. Data is a flat (or
// nested) JSON array in row-major order: numbers for INT*/UINT*/FP*,
// strings for BYTES. With Triton's binary tensor data extension Data is
// absent and Parameters has binary_data_size: the tensor's raw bytes
// follow the JSON in the body.
type Tensor struct {
	Name       string     `json:"name"`
	Shape      []int64    `json:"shape"`
	Datatype   string     `json:"datatype"`
	Parameters Parameters `json:"parameters,omitempty"`
	Data       RawData    `json:"data,omitempty"`
}

// Parameters are free-form request, tensor or output parameters: each
// value a string, number or boolean.
type Parameters map[string]json.RawMessage

// RequestedOutput names an output the client wants, with its parameters
// (for example {"name": "top_k", "parameters": {"k": 5}}; Triton's
// binary_data and classification are parameters too).
type RequestedOutput struct {
	Name       string     `json:"name"`
	Parameters Parameters `json:"parameters,omitempty"`
}

// InferRequest is the body of POST /v2/models/{name}/infer (or its JSON
// header, with binary tensor data). Request parameters rnnserve reads:
// sequence_id (string or unsigned integer), sequence_start,
// sequence_end (booleans), binary_data_output (boolean), and executor
// (string) for tree models; others are ignored. ModelName and
// ModelVersion, when given, must agree with the URL.
type InferRequest struct {
	ID           string            `json:"id,omitempty"`
	ModelName    string            `json:"model_name,omitempty"`
	ModelVersion string            `json:"model_version,omitempty"`
	Parameters   Parameters        `json:"parameters,omitempty"`
	Inputs       []Tensor          `json:"inputs"`
	Outputs      []RequestedOutput `json:"outputs,omitempty"`
}

// OutputTensor is one tensor of an InferResponse, as clients decode it.
// With binary data, Data is absent and Parameters has binary_data_size.
type OutputTensor struct {
	Name       string         `json:"name"`
	Shape      []int64        `json:"shape"`
	Datatype   string         `json:"datatype"`
	Parameters map[string]any `json:"parameters,omitempty"`
	Data       any            `json:"data,omitempty"`
}

// InferResponse answers an InferRequest, as clients decode it.
type InferResponse struct {
	ModelName    string         `json:"model_name"`
	ModelVersion string         `json:"model_version,omitempty"`
	ID           string         `json:"id,omitempty"`
	Parameters   map[string]any `json:"parameters,omitempty"`
	Outputs      []OutputTensor `json:"outputs"`
}

// GenerateRequest is the body of POST /v2/models/{name}/generate and
// generate_stream, Triton's generate extension: text_input and parameters
// (max_tokens, temperature, top_k, top_p, seed, stop). The parameters may
// also stand at the top level of the object, as Triton allows. Prompt and
// PromptTokens are rnnserve's: Prompt is text_input's older name,
// PromptTokens replaces it for models whose vocabulary is not bytes.
type GenerateRequest struct {
	TextInput    *string         `json:"text_input,omitempty"`
	Prompt       *string         `json:"prompt,omitempty"`
	PromptTokens RawData         `json:"prompt_tokens,omitempty"` // JSON array of ids, read by the server with a bound
	Parameters   GenerateOptions `json:"parameters"`
	GenerateOptions
}

// GenerateOptions are the sampling parameters of a generate request.
type GenerateOptions struct {
	MaxTokens   *int     `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	Seed        *uint64  `json:"seed,omitempty"`
	// Stop is one string or a list of them.
	Stop json.RawMessage `json:"stop,omitempty"`
	// Stream is accepted for Triton clients that send it; the endpoint
	// (generate or generate_stream) decides.
	Stream *bool `json:"stream,omitempty"`
}

// GenerateResponse answers POST /v2/models/{name}/generate, and is each
// Server-Sent Event of generate_stream (text_output then holds one
// token's text). RNNServe carries rnnserve's own figures.
type GenerateResponse struct {
	ModelName    string           `json:"model_name"`
	ModelVersion string           `json:"model_version"`
	TextOutput   string           `json:"text_output"`
	RNNServe     GenerateRNNServe `json:"rnnserve"`
}

// GenerateRNNServe are rnnserve's figures of a generate response: the
// token ids and their log-probabilities (one of each per event in a
// stream), and, when the generation has ended, how.
type GenerateRNNServe struct {
	Tokens   []int64   `json:"tokens"`
	LogProbs []float64 `json:"logprobs"`
	// FinishReason is set on the whole response and on a stream's last
	// event: length (max_tokens reached), stop (a stop string was
	// generated) or canceled. A stream cut short by an error ends with an
	// event holding {"error": "..."} instead.
	FinishReason string `json:"finish_reason,omitempty"`
}

// GenerateEvent is one line of the NDJSON stream (application/x-ndjson)
// that answers a generate request asking for it: a generated token, or,
// last, a GenerateDone line.
type GenerateEvent struct {
	Index   int     `json:"index"`
	Token   int64   `json:"token"`
	Text    string  `json:"text"`
	LogProb float64 `json:"logprob"`
}

// GenerateDone is the last line of an NDJSON generate stream.
type GenerateDone struct {
	Done   bool   `json:"done"`          // always true
	Tokens int    `json:"tokens"`        // tokens generated
	Reason string `json:"finish_reason"` // length, stop, canceled or error
	// Error says what cut the stream short (finish_reason error): the
	// server's drain timeout, an internal error.
	Error string `json:"error,omitempty"`
}

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
}

// ModelStatsResponse answers GET /v2/models[/{name}[/versions/{v}]]/stats
// in the schema of Triton's statistics extension.
type ModelStatsResponse struct {
	ModelStats []ModelStats `json:"model_stats"`
}

// ModelStats are one model version's statistics. RNNServe carries
// rnnserve's own figures.
type ModelStats struct {
	Name           string         `json:"name"`
	Version        string         `json:"version"`
	LastInference  uint64         `json:"last_inference"` // ms since the epoch, 0 before the first
	InferenceCount uint64         `json:"inference_count"`
	ExecutionCount uint64         `json:"execution_count"`
	InferenceStats InferenceStats `json:"inference_stats"`
	BatchStats     []BatchStats   `json:"batch_stats"`
	RNNServe       RNNServeStats  `json:"rnnserve"`
}

// InferenceStats are Triton's per-phase request statistics.
type InferenceStats struct {
	Success       StatDuration `json:"success"`
	Fail          StatDuration `json:"fail"`
	Queue         StatDuration `json:"queue"`
	ComputeInput  StatDuration `json:"compute_input"`
	ComputeInfer  StatDuration `json:"compute_infer"`
	ComputeOutput StatDuration `json:"compute_output"`
	CacheHit      StatDuration `json:"cache_hit"`
	CacheMiss     StatDuration `json:"cache_miss"`
}

// BatchStats are Triton's per-batch-size statistics (rnnserve reports
// none: its batches change size at every step).
type BatchStats struct {
	BatchSize     uint64       `json:"batch_size"`
	ComputeInput  StatDuration `json:"compute_input"`
	ComputeInfer  StatDuration `json:"compute_infer"`
	ComputeOutput StatDuration `json:"compute_output"`
}

// StatDuration is a count and a total duration in nanoseconds.
type StatDuration struct {
	Count uint64 `json:"count"`
	Ns    uint64 `json:"ns"`
}

// RNNServeStats are rnnserve's own figures of a model: requests by
// outcome, batched steps and the rows they carried, live sequences,
// requests in flight and queued.
type RNNServeStats struct {
	Requests      int64   `json:"requests"`
	Success       int64   `json:"success"`
	Failed        int64   `json:"failed"`
	Rejected      int64   `json:"rejected"` // 503 (queue full, draining) and 429 (too many sequences)
	Steps         int64   `json:"steps"`    // batched steps and whole plans run
	Tokens        int64   `json:"tokens"`   // rows times steps they carried
	MeanBatchRows float64 `json:"mean_batch_rows"`
	LiveSequences int     `json:"live_sequences"`
	InFlight      int64   `json:"in_flight"`
	QueueLength   int     `json:"queue_length"`
}

// RepositoryIndexRequest is the optional body of POST
// /v2/repository/index. RepositoryName is accepted for clients that send
// it; it must be empty or name the server's one repository.
type RepositoryIndexRequest struct {
	RepositoryName string `json:"repository_name,omitempty"`
	Ready          bool   `json:"ready,omitempty"`
}

// RepositoryModel is one entry of the repository index.
type RepositoryModel struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`  // READY or UNAVAILABLE
	Reason  string `json:"reason,omitempty"` // why UNAVAILABLE
}

// RepositoryLoadRequest is the optional body of POST
// /v2/repository/models/{name}/load and /unload. rnnserve takes no
// load parameters (no config override, no file upload) and reads
// unload_dependents only to accept it: its models have no dependents.
type RepositoryLoadRequest struct {
	Parameters Parameters `json:"parameters,omitempty"`
}

// ModelConfig answers GET /v2/models/{name}/config: the model's
// configuration in the schema of Triton's model configuration (field
// names of model_config.proto in its JSON form), with rnnserve's own
// spec and serving config under RNNServe.
type ModelConfig struct {
	Name             string            `json:"name"`
	Platform         string            `json:"platform"`
	Backend          string            `json:"backend"`
	MaxBatchSize     int               `json:"max_batch_size"`
	Input            []ConfigTensor    `json:"input"`
	Output           []ConfigTensor    `json:"output"`
	InstanceGroup    []InstanceGroup   `json:"instance_group"`
	DynamicBatching  *DynamicBatching  `json:"dynamic_batching,omitempty"`
	SequenceBatching *SequenceBatching `json:"sequence_batching,omitempty"`
	// Parameters are Triton's free-form parameters, which its protos
	// carry: rnnserve puts its model facts there as JSON, "rnn" (the
	// metadata's rnn object) and "rnnserve" (RNNServe below), so that a
	// client generated from Triton's or KServe's protos reads them.
	Parameters map[string]ModelParameter `json:"parameters,omitempty"`
	RNNServe   ConfigRNNServe            `json:"rnnserve"`
}

// ModelParameter is a value of a model configuration's parameters.
type ModelParameter struct {
	StringValue string `json:"string_value"`
}

// ConfigTensor is an input or output of a model configuration. Dims
// leave out the batch dimension (MaxBatchSize > 0); -1 is any size.
type ConfigTensor struct {
	Name     string   `json:"name"`
	DataType string   `json:"data_type"` // TYPE_FP32, TYPE_INT64, TYPE_STRING, ...
	Dims     []int64  `json:"dims"`
	Reshape  *Reshape `json:"reshape,omitempty"`
	Optional bool     `json:"optional,omitempty"` // an input a request may leave out
}

// Reshape is the shape a tensor has for the model when it differs from
// Dims (a scalar per batch row: Dims [1], Reshape []).
type Reshape struct {
	Shape []int64 `json:"shape"`
}

// InstanceGroup says how many copies of the model run, and where.
type InstanceGroup struct {
	Count int    `json:"count"`
	Kind  string `json:"kind"` // KIND_CPU
}

// DynamicBatching is present when the model batches requests and keeps
// no sequences (tree models); Triton allows it or SequenceBatching, not
// both.
type DynamicBatching struct {
	MaxQueueDelayMicroseconds uint64 `json:"max_queue_delay_microseconds"`
}

// SequenceBatching is present when the model keeps state between the
// requests of a sequence.
type SequenceBatching struct {
	MaxSequenceIdleMicroseconds uint64 `json:"max_sequence_idle_microseconds"`
}

// ConfigRNNServe is rnnserve's own description of a model: its spec
// (model.yaml) and serving config (config.yaml), as JSON objects.
type ConfigRNNServe struct {
	Kind   string         `json:"kind"` // sequence or tree
	Spec   map[string]any `json:"spec"`
	Config map[string]any `json:"config"`
}
