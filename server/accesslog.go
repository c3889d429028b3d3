package server

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"rnnserve/server/internal/infer"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Request ids and the access log. Every request, REST or gRPC, gets a
// request id: the client's own when it sends a usable one (the
// X-Request-Id header, or the x-request-id metadata key), else a new one.
// The id comes back in the same header or response metadata, is in the
// request's context (RequestID), and is on the request's access log line,
// so that a client's, a proxy's and the server's logs of one request can
// be joined. A usable client id is 1 to maxRequestID visible ASCII
// characters; any other is replaced by a new id, not refused: the id is
// for the logs and never changes what the request does.

const (
	// RequestIDHeader is the HTTP header that carries a request id, both
	// ways.
	RequestIDHeader = "X-Request-Id"
	// RequestIDMetadata is the gRPC metadata key that carries it, in the
	// request's metadata and the response's header metadata.
	RequestIDMetadata = "x-request-id"
	maxRequestID      = 128
)

type requestIDKey struct{}

// RequestID is the request id of the request ctx belongs to, or "" when
// the request did not pass through an AccessLog.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// AccessLog gives every request an id and, when it has a logger, writes
// one log line per request when it ends: at level Info, message
// "request", with the request id, protocol (rest or grpc), method (HTTP
// method, or the gRPC method's full name), path (REST), model (gRPC: the
// model the request names; a stream's line lists those its requests
// named), status (HTTP status, or the gRPC code's name), response bytes
// (REST), duration in milliseconds, the peer's address, and the sequence
// id header or metadata when the request had one. A streamed gRPC call is
// one line when the stream ends. Health probes get ids but no line unless
// Probes is set.
//
// Wrap the REST handler with Handler and pass GRPCOptions to NewGRPC. One
// AccessLog may serve both; it is safe for concurrent use.
type AccessLog struct {
	log *slog.Logger // nil: ids only, no lines
	ids requestIDs
	// Probes logs health probes too: REST's /v2/health/live and ready,
	// gRPC's health service and ServerLive and ServerReady. Off (the
	// default), they get request ids but no lines.
	Probes bool
}

// isProbe reports whether a REST path or gRPC method is a health probe.
func isProbe(pathOrMethod string) bool {
	switch pathOrMethod {
	case "/v2/health/live", "/v2/health/ready",
		"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch", "/grpc.health.v1.Health/List",
		"/inference.GRPCInferenceService/ServerLive", "/inference.GRPCInferenceService/ServerReady":
		return true
	}
	return false
}

// NewAccessLog returns an AccessLog writing to log; a nil log gives
// request ids without log lines.
func NewAccessLog(log *slog.Logger) *AccessLog {
	a := &AccessLog{log: log}
	a.ids.init()
	return a
}

// requestIDs makes new request ids: a prefix random for each process and
// a counter, so that ids from several replicas do not collide.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func (g *requestIDs) init() {
	var b [10]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	g.prefix = strings.ToLower(base32.StdEncoding.EncodeToString(b[:]))
}

// pick is the client's id when values holds one usable id, else a new one.
func (g *requestIDs) pick(values []string) string {
	if len(values) == 1 && usableRequestID(values[0]) {
		return values[0]
	}
	return g.prefix + "-" + strconv.FormatUint(g.n.Add(1), 10)
}

func usableRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := range len(id) {
		if c := id[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// Handler wraps h: it sets the request id (header X-Request-Id of the
// response, RequestID of the request's context) before h runs and logs
// the request after it.
func (a *AccessLog) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := a.ids.pick(r.Header.Values(RequestIDHeader))
		w.Header().Set(RequestIDHeader, id)
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
		if a.log == nil || !a.Probes && isProbe(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == 0 { // nothing written: net/http answers 200
			sw.status = http.StatusOK
		}
		attrs := []slog.Attr{
			slog.String("request_id", id), slog.String("protocol", protocolREST),
			slog.String("method", infer.Clip(r.Method)), slog.String("path", infer.Clip(r.URL.Path)),
			slog.Int("status", sw.status), slog.Int64("bytes", sw.bytes),
			slog.Float64("duration_ms", millis(time.Since(start))), slog.String("remote", r.RemoteAddr),
		}
		if v := r.Header.Values(SequenceHeader); len(v) > 0 {
			attrs = append(attrs, slog.String("sequence_id", infer.Clip(strings.Join(v, ","))))
		}
		// A record without the caller's PC (no handler of the access log
		// adds the source): runtime.Callers was a fifth of a line's cost.
		if h, ctx := a.log.Handler(), r.Context(); h.Enabled(ctx, slog.LevelInfo) {
			rec := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
			rec.AddAttrs(attrs...)
			_ = h.Handle(ctx, rec)
		}
	})
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// statusWriter records the status and the size of a response. It passes
// Flush on (streamed generation) and unwraps for http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// GRPCOptions are the interceptors that do for gRPC calls what Handler
// does for REST requests: the id comes from and goes back in the
// x-request-id metadata.
func (a *AccessLog) GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream)}
}

func (a *AccessLog) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	id := a.ids.pick(metadata.ValueFromIncomingContext(ctx, RequestIDMetadata))
	grpc.SetHeader(ctx, metadata.Pairs(RequestIDMetadata, id)) // fails only once headers went out: not yet
	ctx = context.WithValue(ctx, requestIDKey{}, id)
	if a.log == nil || !a.Probes && isProbe(info.FullMethod) {
		return h(ctx, req)
	}
	// A panic goes on to the recovering interceptor outside this one,
	// which answers INTERNAL; the line says so.
	code := codes.Internal
	defer func() { a.logGRPC(ctx, id, info.FullMethod, modelOf(req), code, start) }()
	resp, err = h(ctx, req)
	code = status.Code(err)
	return resp, err
}

func (a *AccessLog) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	start := time.Now()
	ctx := ss.Context()
	id := a.ids.pick(metadata.ValueFromIncomingContext(ctx, RequestIDMetadata))
	ss.SetHeader(metadata.Pairs(RequestIDMetadata, id))
	ctx = context.WithValue(ctx, requestIDKey{}, id)
	ss = &idStream{ServerStream: ss, ctx: ctx}
	if a.log == nil || !a.Probes && isProbe(info.FullMethod) {
		return h(srv, ss)
	}
	code := codes.Internal
	is := ss.(*idStream)
	defer func() { a.logGRPC(ctx, id, info.FullMethod, is.models(), code, start) }()
	err = h(srv, ss)
	code = status.Code(err)
	return err
}

func (a *AccessLog) logGRPC(ctx context.Context, id, method, model string, code codes.Code, start time.Time) {
	attrs := []slog.Attr{
		slog.String("request_id", id), slog.String("protocol", protocolGRPC),
		slog.String("method", method), slog.String("status", code.String()),
		slog.Float64("duration_ms", millis(time.Since(start))),
	}
	if model != "" {
		attrs = append(attrs, slog.String("model", model))
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("remote", p.Addr.String()))
	}
	if v := metadata.ValueFromIncomingContext(ctx, SequenceMetadata); len(v) > 0 {
		attrs = append(attrs, slog.String("sequence_id", infer.Clip(strings.Join(v, ","))))
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
}

// modelOf is the model a gRPC request names (ModelInfer's model_name,
// ModelMetadata's name, a repository call's model_name), clipped, or "".
func modelOf(req any) string {
	switch r := req.(type) {
	case interface{ GetModelName() string }:
		return infer.Clip(r.GetModelName())
	case interface{ GetName() string }:
		return infer.Clip(r.GetName())
	}
	return ""
}

// maxStreamModels bounds the model names one stream's line lists.
const maxStreamModels = 4

// idStream is a server stream whose context carries the request id; it
// notes the models its requests name, for the access line.
type idStream struct {
	grpc.ServerStream
	ctx    context.Context
	named  []string
	others int // requests naming models past maxStreamModels
}

func (s *idStream) Context() context.Context { return s.ctx }

func (s *idStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		if name := modelOf(m); name != "" && !slices.Contains(s.named, name) {
			if len(s.named) < maxStreamModels {
				s.named = append(s.named, name)
			} else {
				s.others++
			}
		}
	}
	return err
}

// models are the models the stream's requests named, comma-separated.
func (s *idStream) models() string {
	out := strings.Join(s.named, ",")
	if s.others > 0 {
		out += ",..."
	}
	return out
}
