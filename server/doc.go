// Package server is rnnserve's HTTP front door: the KServe v2 inference
// protocol over gin, stateful sequences, text generation, cellular
// batching of many clients' requests step by step, and Prometheus metrics.
//
// The server does no arithmetic of its own: it decodes requests, hands
// them to a model's batcher (schedule.Stepper) or runs a whole-request
// schedule.Plan, and encodes the results. Errors map to status codes by
// type (errors.Is / errors.As), never by message text.
//
// Lifecycle: New builds the handler and loads the models; Start starts
// one batcher goroutine per batched model; Stop drains them. cmd/serve
// owns the http.Server and signals.
package server
