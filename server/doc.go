// Package server is rnnserve's HTTP front door: the KServe v2 inference
// protocol over gin, stateful sequences, text generation, cellular
// batching of many clients' requests step by step, and Prometheus metrics.
//
// The server does no arithmetic of its own: it decodes requests, hands
// them to a model's batcher (schedule.Stepper) or runs a whole-request
// schedule.Plan, and encodes the results. Errors map to status codes by
// type (errors.Is / errors.As), never by message text.
//
// Whole-request plans run under the schedule New chose for the model from
// its modelled traffic (traffic.go): A, A+, P or P-bf16. P models share the
// process-wide schedule.DefaultPool of GOMAXPROCS workers, which runs one
// plan at a time (concurrent P requests queue on it); the request's
// goroutine is worker 0 for the job, and gets its thread back unpinned.
//
// Lifecycle: New builds the handler and loads the models; Start starts
// one batcher goroutine per batched model; Stop drains them. cmd/serve
// owns the http.Server and signals.
package server
