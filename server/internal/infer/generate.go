package infer

import "time"

// GenerateRequest asks a language model to continue a prompt, in
// transport-neutral form: REST's generate and generate_stream endpoints
// (Triton's generate extension) decode into it, and gRPC's streaming
// inference can too. Package server's Server.Generate runs it.
type GenerateRequest struct {
	Model, Version string
	// Prompt is text for a byte-level model (vocabulary 256): each byte a
	// token. PromptTokens replaces it for other models.
	Prompt       []byte
	PromptTokens []int64
	MaxTokens    int     // 0: 64
	Temperature  float64 // 0: greedy
	TopK         int     // 0: every token
	TopP         float64 // 0 or 1: every token; else the smallest set of most likely tokens whose probabilities reach TopP
	Seed         uint64  // the same seed gives the same text
	// Stop ends the generation once the generated text ends with one of
	// these (byte-level models); the text includes it.
	Stop [][]byte

	Protocol string    // metrics label: "rest" or "grpc"
	Received time.Time // when the transport got the request

	// Generated, when set, is called once the model has made every token
	// it will, those not yet emitted waiting in memory: a transport then
	// bounds the time the rest may take to write, so that a reader just
	// fast enough for each token cannot hold its connection for hours.
	Generated func()
	// Charge, set by the transport to its request's share of the memory
	// budget (or by the server when it is not), takes n bytes for as long
	// as that share lasts: the generation's state, its tokens waiting to
	// be written and a transport's copy of them. An error refuses the
	// request.
	Charge func(n int64) error
}

// GenerateToken is one generated token.
type GenerateToken struct {
	Index   int
	Token   int64
	Text    []byte // its byte for a byte-level model, else empty
	LogProb float64
}
