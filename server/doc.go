// Package server is rnnserve's inference server: the KServe v2 inference
// protocol with Triton's extensions over REST (gin) and gRPC, stateful sequences,
// text generation, cellular batching of many clients' requests step by
// step, a model repository with hot swap, and Prometheus metrics.
//
// One internal request type (package server/internal/infer, named here
// in request.go) carries every inference request, whatever the transport:
// the REST front end (rest.go) decodes JSON and Triton's binary tensor
// data into a Request with the codec of package server/internal/wire,
// calls Server.Infer and encodes the Response with it; the gRPC front
// end (grpc.go) does the same with its messages, converted by the same
// package on the generated code of server/inferencepb. Generation has
// GenerateRequest and Server.Generate.
// Behind them, batching, sequences, limits, statistics and metrics are
// the same for every transport. Both front ends also take a sequence id
// from a header or metadata a load balancer can hash on (sticky.go), and
// an AccessLog wraps them for request ids and access log lines
// (accesslog.go). Errors map to HTTP statuses by the sentinels of
// package infer (StatusOf), and to gRPC codes by the same sentinels
// (CodeOf, in package wire), never by message text.
//
// A model is one of two kinds behind the model interface (model.go): a
// sequence model (seqmodel.go: LSTM/GRU stacks) or a tree model
// (treemodel.go). Both batch through one batcher (batcher.go) whose lanes
// each own a batch of the kind's own (a cellular schedule.Stepper, or the
// trees of the next plan) and share the model's core slots with
// whole-request plans.
//
// The server runs no layer of a model itself: it hands requests to a
// model's batcher or runs a whole-request schedule.Plan of the schedule
// chosen from the model's modelled traffic (package
// server/internal/choice): A, A+, P, P-bf16 or P-int8. What it computes
// is on a model's outputs: probs and top_k from the head's logits
// (seqmodel.go), and generation's nucleus sampling (generate.go). P
// programs and tree plans of more than one core run on worker pools the
// owner hands over in Deps (one per size PoolSizes lists), which run one
// plan at a time.
//
// Under load and abuse (docs/limits.md): one memory
// budget bounds the request bytes in flight of every transport (package
// server/internal/limits, made in budget.go); a cap spans the listeners'
// connections (package server/internal/connlimit, wrapped in conns.go;
// gRPC calls are admitted in grpclimits.go); every JSON text is checked
// for UTF-8 and lone surrogate escapes as it is read (package wire);
// decoded tensors are bounded and charged to the budget; a panic in a
// lane, a request or a pool job fails only the requests it hit
// (panics.go).
//
// Lifecycle: the owner (cmd/serve) makes the pools, New builds the server
// and loads the models, Start starts every model's batcher, the sequence
// janitor and the traffic probe, Stop drains them, and the owner closes
// the pools. Models loaded later (Load: the folder read by package
// server/internal/repository, swapped in by repository.go) start at once;
// a replaced or unloaded model stops once the requests holding it have
// left. Shutdown under load goes through LameDuck, the owner's drain, Cut
// and Idle (lameduck.go) before Stop.
package server
