package server

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"rnnserve/cachesim"
	"rnnserve/server/internal/choice"
	"rnnserve/server/internal/infer"
)

// Options configure a Server. Zero values mean the defaults of
// DefaultOptions; call EnsureDefaults, then Validate.
type Options struct {
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxResponseBytes bounds a response: a request whose response would
	// be larger in its encoding (sized before it runs) is refused.
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// WriteTimeout is how long a REST response (a streamed one: each of
	// its events) may take to be written before the connection is closed.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxSteps bounds the time steps of one request (B rows count once).
	MaxSteps int `yaml:"max_steps"`
	// MaxRequestRows bounds the batch size B of one request.
	MaxRequestRows int `yaml:"max_request_rows"`
	// MaxGenerateTokens bounds max_tokens of a generate request.
	MaxGenerateTokens int `yaml:"max_generate_tokens"`

	// Budget bounds the request bytes in flight across the server.
	Budget BudgetOptions `yaml:"budget"`
	// MinBodyRate is the slowest a request body may arrive, in bytes a
	// second, after a start of one budget step (64 KiB) at that rate: a
	// body that falls behind is refused (408) and gives its share of the
	// budget back.
	MinBodyRate int64 `yaml:"min_body_rate"`
	// MaxConnections caps the connections open at once over every
	// listener wrapped by Server.Listener; more wait in the kernel's
	// accept queue until one closes.
	MaxConnections int `yaml:"max_connections"`
	// IdleTimeout closes a connection that has had nothing in flight for
	// this long: an HTTP keep-alive connection between requests (the
	// owner's http.Server), a gRPC connection without calls (a GOAWAY
	// first, so its client reconnects without failing a call).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// GRPC bounds what a gRPC client can make the transport hold.
	GRPC GRPCOptions `yaml:"grpc"`

	Batching  BatchOptions    `yaml:"batching"`
	Sequences SequenceOptions `yaml:"sequences"`

	// CacheBytes is the last-level cache size used for the schedule
	// choice and the modelled traffic; 0 reads it from the host.
	CacheBytes int64 `yaml:"cache_bytes"`
	// PrivateCacheBytes is one core's private cache (its L2) for the
	// schedule choice's per-core traffic; 0 reads it from the host.
	PrivateCacheBytes int64 `yaml:"private_cache_bytes"`
	// TrafficSteps is the reference input length for modelled traffic.
	TrafficSteps int `yaml:"traffic_steps"`
	// ModelControlMode is who may load and unload models once the server
	// runs, as Triton's --model-control-mode: none (the default; load and
	// unload calls answer 403), explicit (load and unload calls do it) or
	// poll (the owner calls Poll every RepositoryPollInterval). See
	// control.go.
	ModelControlMode ModelControl `yaml:"model_control_mode"`
	// RepositoryPollInterval is how often poll mode rescans the
	// repository.
	RepositoryPollInterval time.Duration `yaml:"repository_poll_interval"`
	// StrictReadiness makes the server ready only while it serves every
	// model it should (Triton's --strict-readiness); off, it is ready once
	// started, whatever failed to load.
	StrictReadiness *bool `yaml:"strict_readiness"`

	// ScheduleTiming is how long, per model, schedule auto may spend at
	// load timing its best-modelled candidates on this host (a batch-1
	// input of TrafficSteps steps) before it picks the fastest; 0 turns
	// the timing off, and the modelled traffic alone decides. When the
	// clock would overrule the model it times the two once more, for as
	// long again.
	ScheduleTiming time.Duration `yaml:"schedule_timing"`
}

// BatchOptions configure cellular batching.
type BatchOptions struct {
	// Enabled turns cellular batching on for unidirectional models; when
	// off (or for bidirectional models) each request runs its own plan.
	Enabled *bool `yaml:"enabled"`
	// MaxRows is the most sequences in one model's running batch.
	MaxRows int `yaml:"max_rows"`
	// MaxQueueDelay is how long an empty batch waits for more requests
	// before its first step; 0 starts at once.
	MaxQueueDelay time.Duration `yaml:"max_queue_delay"`
	// QueueLength is how many requests may wait for a place; one more is
	// refused at once with 503 and Retry-After.
	QueueLength int `yaml:"queue_length"`
	// Workers is how many requests of one model run at once: the number
	// of cellular batches (lanes, one goroutine and so one core each) of a
	// batched model, and of concurrent whole-request plans of an unbatched
	// one. Default: GOMAXPROCS, the cores the process may use.
	Workers int `yaml:"workers"`
}

// BudgetOptions configure the memory budget (budget.go).
type BudgetOptions struct {
	// Bytes is how many request body bytes may be in flight at once, all
	// requests and protocols together: 0, or at least MaxBodyBytes. 0
	// means DefaultBudgetBytes (or MaxBodyBytes, if larger), which suits a
	// machine of 4 GiB or more; an owner that knows the machine's memory
	// sets BudgetFor(memory) (cmd/serve does).
	Bytes int64 `yaml:"bytes"`
	// Wait is how long a request waits for room in the budget before it
	// is refused with 503 and Retry-After.
	Wait time.Duration `yaml:"wait"`
}

// DefaultBudgetBytes is BudgetOptions.Bytes when nothing sets it.
const DefaultBudgetBytes = 256 << 20

// BudgetFor is the default memory budget on a machine (or container) with
// mem bytes of memory: an eighth of it, at most DefaultBudgetBytes and at
// least one request at the body limit maxBody. Measured (docs/load.md),
// 300 clients posting near-limit bodies took the process to about twice
// its 256 MiB budget above its idle 42 MiB (the decoder's buffer, decoded
// tensors and the collector's headroom), so requests in flight stay
// within about a quarter of the memory, leaving the rest for models,
// sequences and outputs.
func BudgetFor(mem, maxBody int64) int64 {
	return max(min(mem/8, DefaultBudgetBytes), maxBody)
}

// GRPCOptions bound the gRPC transport (grpc.go).
type GRPCOptions struct {
	// MaxConcurrentStreams is the most calls one connection may have
	// open at once; the transport refuses more (REFUSED_STREAM, which
	// clients retry).
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`
	// MaxCalls is the most gRPC calls open at once over all connections,
	// beyond which a call is refused (UNAVAILABLE, with a retry delay)
	// unless its connection has fewer than its fair share of them.
	MaxCalls int `yaml:"max_calls"`
	// MaxInferStreams is the most ModelStreamInfer streams open at once.
	// Each may make the transport hold one request (up to MaxBodyBytes)
	// beyond the memory budget while it arrives; 0: the budget over
	// MaxBodyBytes (at least 4).
	MaxInferStreams int `yaml:"max_infer_streams"`
	// FirstMessageTimeout is how long a call's message (a stream's first
	// request) may take to arrive from the call's start.
	FirstMessageTimeout time.Duration `yaml:"first_message_timeout"`
	// MaxConnectionAge sends a connection GOAWAY once it is this old, so
	// that clients spread over replicas a load balancer added; its calls
	// then get MaxConnectionAgeGrace to finish before it is closed. 0:
	// connections live as long as they are used.
	MaxConnectionAge      time.Duration `yaml:"max_connection_age"`
	MaxConnectionAgeGrace time.Duration `yaml:"max_connection_age_grace"`
	// KeepaliveTime is how long a connection may be silent before the
	// server pings its client; a ping unanswered within
	// grpcKeepaliveTimeout closes it, and with it what the server held
	// for a client that stopped reading.
	KeepaliveTime time.Duration `yaml:"keepalive_time"`
}

// SequenceOptions configure stateful sequences.
type SequenceOptions struct {
	// IdleTimeout ends a sequence that has had no request for this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxLive caps the number of live sequences per model.
	MaxLive int `yaml:"max_live"`
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	on := true
	return Options{
		MaxBodyBytes:      8 << 20,
		MaxResponseBytes:  64 << 20,
		WriteTimeout:      30 * time.Second,
		MaxSteps:          4096,
		MaxRequestRows:    64,
		MaxGenerateTokens: 4096,
		Budget:            BudgetOptions{Wait: time.Second},
		MinBodyRate:       64 << 10,
		MaxConnections:    4096,
		IdleTimeout:       15 * time.Second,
		GRPC: GRPCOptions{
			MaxConcurrentStreams:  100,
			MaxCalls:              1024,
			FirstMessageTimeout:   30 * time.Second,
			MaxConnectionAgeGrace: 30 * time.Second,
			KeepaliveTime:         30 * time.Second,
		},
		Batching: BatchOptions{
			Enabled:     &on,
			MaxRows:     64,
			QueueLength: 256,
			Workers:     runtime.GOMAXPROCS(0),
		},
		Sequences:              SequenceOptions{IdleTimeout: 5 * time.Minute, MaxLive: 1024},
		TrafficSteps:           100,
		ScheduleTiming:         choice.DefaultTiming,
		ModelControlMode:       ControlNone,
		RepositoryPollInterval: 15 * time.Second,
		StrictReadiness:        &on,
	}
}

// EnsureDefaults fills zero fields from DefaultOptions.
func (o *Options) EnsureDefaults() {
	d := DefaultOptions()
	setInt64(&o.MaxBodyBytes, d.MaxBodyBytes)
	setInt64(&o.MaxResponseBytes, d.MaxResponseBytes)
	setDuration(&o.WriteTimeout, d.WriteTimeout)
	setInt(&o.MaxSteps, d.MaxSteps)
	setInt(&o.MaxRequestRows, d.MaxRequestRows)
	setInt(&o.MaxGenerateTokens, d.MaxGenerateTokens)
	setInt64(&o.MinBodyRate, d.MinBodyRate)
	if o.Budget.Wait == 0 {
		o.Budget.Wait = d.Budget.Wait
	}
	setInt(&o.MaxConnections, d.MaxConnections)
	setDuration(&o.IdleTimeout, d.IdleTimeout)
	setInt(&o.GRPC.MaxConcurrentStreams, d.GRPC.MaxConcurrentStreams)
	setInt(&o.GRPC.MaxCalls, d.GRPC.MaxCalls)
	setDuration(&o.GRPC.FirstMessageTimeout, d.GRPC.FirstMessageTimeout)
	setDuration(&o.GRPC.MaxConnectionAgeGrace, d.GRPC.MaxConnectionAgeGrace)
	setDuration(&o.GRPC.KeepaliveTime, d.GRPC.KeepaliveTime)
	if o.Batching.Enabled == nil {
		o.Batching.Enabled = d.Batching.Enabled
	}
	setInt(&o.Batching.MaxRows, d.Batching.MaxRows)
	setInt(&o.Batching.QueueLength, d.Batching.QueueLength)
	setInt(&o.Batching.Workers, d.Batching.Workers)
	if o.Sequences.IdleTimeout == 0 {
		o.Sequences.IdleTimeout = d.Sequences.IdleTimeout
	}
	setInt(&o.Sequences.MaxLive, d.Sequences.MaxLive)
	setInt(&o.TrafficSteps, d.TrafficSteps)
	if o.ModelControlMode == "" {
		o.ModelControlMode = d.ModelControlMode
	}
	if o.RepositoryPollInterval == 0 {
		o.RepositoryPollInterval = d.RepositoryPollInterval
	}
	if o.StrictReadiness == nil {
		o.StrictReadiness = d.StrictReadiness
	}
}

func setInt(p *int, d int) {
	if *p == 0 {
		*p = d
	}
}

func setDuration(p *time.Duration, d time.Duration) {
	if *p == 0 {
		*p = d
	}
}

func setInt64(p *int64, d int64) {
	if *p == 0 {
		*p = d
	}
}

// ErrOptions is matched by every error Validate returns.
var ErrOptions = errors.New("server: invalid options")

// OptionError is the error Validate returns: the setting, by its YAML key
// below server: (max_steps, batching.max_rows), and what is wrong with it.
// It matches ErrOptions.
type OptionError struct {
	Key     string
	Problem string
}

func (e *OptionError) Error() string { return ErrOptions.Error() + ": " + e.Key + " " + e.Problem }

func (e *OptionError) Is(target error) bool { return target == ErrOptions }

func invalidOption(key, format string, a ...any) error {
	return &OptionError{Key: key, Problem: fmt.Sprintf(format, a...)}
}

// Validate reports the first invalid setting, naming it.
func (o Options) Validate() error {
	for _, c := range []struct {
		name string
		v    int64
		lo   int64
		hi   int64
	}{
		{"max_body_bytes", o.MaxBodyBytes, 1 << 10, 1 << 34},
		{"min_body_rate", o.MinBodyRate, 1, 1 << 40},
		{"max_response_bytes", o.MaxResponseBytes, 1 << 10, 1 << 40},
		{"max_steps", int64(o.MaxSteps), 1, 1 << 20},
		{"max_request_rows", int64(o.MaxRequestRows), 1, 1 << 16},
		{"max_generate_tokens", int64(o.MaxGenerateTokens), 1, 1 << 20},
		{"max_connections", int64(o.MaxConnections), 1, 1 << 24},
		{"grpc.max_concurrent_streams", int64(o.GRPC.MaxConcurrentStreams), 1, 1 << 16},
		{"grpc.max_calls", int64(o.GRPC.MaxCalls), 1, 1 << 24},
		{"grpc.max_infer_streams", int64(o.GRPC.MaxInferStreams), 0, 1 << 24},
		{"batching.max_rows", int64(o.Batching.MaxRows), 1, 1 << 16},
		{"batching.queue_length", int64(o.Batching.QueueLength), 1, 1 << 20},
		{"batching.workers", int64(o.Batching.Workers), 1, 1024},
		{"sequences.max_live", int64(o.Sequences.MaxLive), 1, 1 << 24},
		{"traffic_steps", int64(o.TrafficSteps), 1, 1 << 16},
		{"cache_bytes", o.CacheBytes, 0, 1 << 40},
		{"private_cache_bytes", o.PrivateCacheBytes, 0, 1 << 40},
	} {
		if c.v < c.lo || c.v > c.hi {
			return invalidOption(c.name, "= %d, want %d..%d", c.v, c.lo, c.hi)
		}
	}
	for _, c := range []struct {
		name string
		v    int64
	}{{"cache_bytes", o.CacheBytes}, {"private_cache_bytes", o.PrivateCacheBytes}} {
		if c.v%cachesim.DefaultLineSize != 0 {
			return invalidOption(c.name, "= %d, want a multiple of the %d-byte cache line", c.v, cachesim.DefaultLineSize)
		}
	}
	if o.Batching.MaxQueueDelay < 0 || o.Batching.MaxQueueDelay > time.Minute {
		return invalidOption("batching.max_queue_delay", "= %v, want 0..1m", o.Batching.MaxQueueDelay)
	}
	if b := o.Budget.Bytes; b != 0 && (b < o.MaxBodyBytes || b > 1<<50) {
		return invalidOption("budget.bytes", "= %d, want 0 (the default) or %d (max_body_bytes)..%d", b, o.MaxBodyBytes, int64(1)<<50)
	}
	if o.Budget.Wait < time.Millisecond || o.Budget.Wait > time.Minute {
		return invalidOption("budget.wait", "= %v, want 1ms..1m", o.Budget.Wait)
	}
	if o.ScheduleTiming < 0 || o.ScheduleTiming > time.Minute {
		return invalidOption("schedule_timing", "= %v, want 0 (off)..1m", o.ScheduleTiming)
	}
	for _, d := range []struct {
		name   string
		v      time.Duration
		lo, hi time.Duration
	}{
		{"idle_timeout", o.IdleTimeout, time.Millisecond, 24 * time.Hour},
		{"write_timeout", o.WriteTimeout, time.Millisecond, 24 * time.Hour},
		{"grpc.max_connection_age", o.GRPC.MaxConnectionAge, 0, 1000 * time.Hour},
		{"grpc.first_message_timeout", o.GRPC.FirstMessageTimeout, time.Millisecond, 24 * time.Hour},
		{"grpc.max_connection_age_grace", o.GRPC.MaxConnectionAgeGrace, time.Millisecond, 24 * time.Hour},
		{"grpc.keepalive_time", o.GRPC.KeepaliveTime, time.Millisecond, 24 * time.Hour}, // grpc-go pings at most once a second
	} {
		if d.v < d.lo || d.v > d.hi {
			return invalidOption(d.name, "= %v, want %v..%v", d.v, d.lo, d.hi)
		}
	}
	if err := o.ModelControlMode.UnmarshalText([]byte(o.ModelControlMode)); err != nil {
		return invalidOption("model_control_mode", "= %q, want none, explicit or poll", infer.Clip(string(o.ModelControlMode)))
	}
	if o.RepositoryPollInterval < 100*time.Millisecond || o.RepositoryPollInterval > time.Hour {
		return invalidOption("repository_poll_interval", "= %v, want 100ms..1h", o.RepositoryPollInterval)
	}
	if o.Sequences.IdleTimeout < time.Millisecond {
		return invalidOption("sequences.idle_timeout", "= %v, want at least 1ms", o.Sequences.IdleTimeout)
	}
	return nil
}
