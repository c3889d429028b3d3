// Package wire holds the server's wire formats: the KServe v2 REST codec
// with Triton's binary tensor data extension, and the conversion of the
// gRPC messages, each to and from the one internal infer.Request and
// infer.Response (and infer.GenerateRequest for generation). Package
// server's handlers read a request with it, run it, and write the answer
// with it; batching, models and metrics are not its business.
//
//   - body.go reads a REST body: size-limited, inflated (gzip, deflate)
//     and limited again, charged to the memory budget as it arrives,
//     failed when it arrives too slowly (Body); and decodes one JSON
//     object from it strictly (DecodeJSON).
//   - text.go and jsonkeys.go check JSON text as it streams: UTF-8, lone
//     surrogate escapes, a key given twice in one object.
//   - rest.go decodes infer requests, JSON tensor data and binary tensor
//     data (DecodeInfer), and writes infer responses (Responses): a
//     hand-written JSON writer, gzip when the client accepts it
//     (acceptenc.go).
//   - float32.go formats a float32 as the JSON writer does, byte for byte
//     strconv.AppendFloat(f, 'g', -1, 32) (the tests compare every
//     float32), about 1.6 times as fast: a model's state in an answer is
//     hundreds of floats, and strconv's formatting was about 5% of the
//     server's CPU at 64 clients.
//   - small.go is DecodeInfer's fast path for a JSON body of at most
//     4 KiB, such as bytelm's 32 tokens: read whole into a pooled
//     buffer, parsed in one pass by a hand-written parser of the plain
//     JSON clients send (the request's known keys, strings without
//     escapes, number or string data). It exists because it is faster:
//     cmd/loadgen's body decodes in 2.2 µs instead of 11.1 µs (5.0 times
//     as fast), with 13 allocations instead of 67 (BenchmarkDecodeInferREST,
//     scripts/ab_bench.py --rounds 10 --benchtime 1s, 2026-11-27, AMD
//     EPYC Zen 4), where encoding/json behind the text and key checkers
//     was about 4% of the server's CPU at 64 clients; a body it parses
//     to the end and leaves to the full decoder (a string with an
//     escape) costs about 4% more than before
//     (BenchmarkDecodeInferRESTFallback). It is never laxer:
//     it builds the Request only where the full decoder builds the same
//     one, converts tensor data with the full decoder's own code, and
//     hands anything else, valid or not, to the full decoder on the same
//     bytes, so every error is the full decoder's (a refused charge too:
//     the charges are the same, in the same order); FuzzDecodeSmall
//     compares the two on every body it takes.
//   - generate.go reads a REST generate body into an
//     infer.GenerateRequest (GenerateFromJSON).
//   - grpc.go converts ModelInferRequest and ModelInferResponse messages
//     (FromGRPC, ToGRPC, GenerateFromGRPC) and maps request errors to gRPC
//     codes (CodeOf).
//   - memory.go bounds the memory decoded tensors take, whatever the
//     transport (TensorMemory).
//
// The package keeps no state of its own: the response buffers and gzip
// writers are fields of a Responses, which its owner (a Server) keeps.
package wire
