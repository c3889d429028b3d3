package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"rnnserve/server/api"
	pb "rnnserve/server/inferencepb"
	"rnnserve/server/internal/infer"
	"rnnserve/server/internal/limits"
	"rnnserve/server/internal/wire"
)

// The gRPC front end: the KServe v2 GRPCInferenceService with Triton's
// additions (streaming inference, model configuration, statistics, model
// repository), the standard health service and server reflection. Its
// handlers decode into the same Request and GenerateRequest the REST front
// end builds and call the same Server methods, so batching, sequences,
// limits, statistics and metrics (labelled protocol="grpc") are shared.

// protocolGRPC labels gRPC requests in the metrics.
const protocolGRPC = "grpc"

// GRPCServer is the gRPC front end of a Server. Build it with
// Server.NewGRPC, Serve it on a listener, and Stop it before the Server.
type GRPCServer struct {
	s      *Server
	gs     *grpc.Server
	health *health.Server
	calls  grpcCalls // the calls open (grpclimits.go)
	// clientStreams are the methods whose clients stream requests.
	clientStreams map[string]bool

	drainOnce sync.Once
	drained   chan struct{} // closed when GracefulStop returns
}

// What the gRPC transport may hold for a client, whatever the settings:
const (
	// grpcStreamWindow is a call's HTTP/2 flow-control window: what a
	// client may send on it before the server reads its message. A
	// static window turns off grpc-go's bandwidth estimation, which would
	// grow every call's window to 16 MiB. Reading a message opens the
	// window to the message's size (grpc-go does, once it has its
	// length), so large messages still arrive in one round trip.
	grpcStreamWindow = 64 << 10
	// grpcConnWindow is a connection's window: bytes on their way to the
	// server at once, over all its calls (grpc-go gives it back as frames
	// arrive, so it bounds no memory, only the rate).
	grpcConnWindow = 1 << 20
	// grpcMaxHeaderList bounds a call's metadata (grpc-go's default is
	// 16 MiB, held for the call's life).
	grpcMaxHeaderList = 64 << 10
	// grpcConnectionTimeout is how long a new connection may take to
	// send its HTTP/2 preface and settings (REST's header timeout).
	grpcConnectionTimeout = 10 * time.Second
	// grpcKeepaliveTimeout is how long a server ping may go unanswered
	// before the connection is closed.
	grpcKeepaliveTimeout = 10 * time.Second
	// grpcMinPingInterval is the shortest interval at which a client may
	// ping; one that pings more often is sent GOAWAY (too_many_pings).
	grpcMinPingInterval = 10 * time.Second
)

// NewGRPC builds the gRPC front end of s. A message larger than the body
// limit (Options.MaxBodyBytes) is refused with RESOURCE_EXHAUSTED before it
// is read. The transport is bounded by Options.GRPC and IdleTimeout and
// the constants above. opts are applied after the front end's own
// options.
func (s *Server) NewGRPC(opts ...grpc.ServerOption) *GRPCServer {
	limit := int(min(s.opts.MaxBodyBytes, math.MaxUint32))
	g := &GRPCServer{s: s, health: health.NewServer(), clientStreams: map[string]bool{}}
	o := &s.opts.GRPC
	g.calls.maxCalls, g.calls.maxStreams = o.MaxCalls, o.MaxInferStreams
	if g.calls.maxStreams == 0 {
		g.calls.maxStreams = max(4, int(s.budget.Size()/s.opts.MaxBodyBytes))
	}
	kp := keepalive.ServerParameters{MaxConnectionIdle: s.opts.IdleTimeout, Time: o.KeepaliveTime, Timeout: grpcKeepaliveTimeout}
	if o.MaxConnectionAge > 0 {
		kp.MaxConnectionAge, kp.MaxConnectionAgeGrace = o.MaxConnectionAge, o.MaxConnectionAgeGrace
	}
	all := append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(limit),
		grpc.MaxConcurrentStreams(uint32(o.MaxConcurrentStreams)),
		grpc.StaticStreamWindowSize(grpcStreamWindow),
		grpc.StaticConnWindowSize(grpcConnWindow),
		grpc.MaxHeaderListSize(grpcMaxHeaderList),
		grpc.ConnectionTimeout(grpcConnectionTimeout),
		grpc.KeepaliveParams(kp),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcMinPingInterval, PermitWithoutStream: true}),
		grpc.SharedWriteBuffer(true),
		grpc.ForceServerCodecV2(newBoundedCodec()),
		grpc.InTapHandle(g.tap),
		grpc.ChainUnaryInterceptor(g.recoverUnary),
		grpc.ChainStreamInterceptor(g.recoverStream),
	}, opts...)
	g.gs = grpc.NewServer(all...)
	reg := registrar{g}
	pb.RegisterGRPCInferenceServiceServer(reg, &grpcService{s: s})
	healthpb.RegisterHealthServer(reg, g.health)
	reflection.Register(reg)
	s.onLameDuck(func() { g.setHealth(healthpb.HealthCheckResponse_NOT_SERVING) })
	s.onReadiness(g.setReadiness)
	return g
}

// setHealth sets the health service's status for "" and the inference
// service.
func (g *GRPCServer) setHealth(st healthpb.HealthCheckResponse_ServingStatus) {
	g.health.SetServingStatus("", st)
	g.health.SetServingStatus(pb.GRPCInferenceService_ServiceDesc.ServiceName, st)
}

// setReadiness follows the server's readiness after a model event (strict
// readiness); the lame duck's NOT_SERVING stays.
func (g *GRPCServer) setReadiness(ready bool) {
	if g.s.InLameDuck() || g.s.draining.Load() {
		return
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	g.setHealth(st)
}

// Serve answers gRPC connections on ln until Stop; it returns nil after
// Stop. The health service reports SERVING (for "" and
// inference.GRPCInferenceService) while the Server is ready, and
// NOT_SERVING from the moment the Server's lame-duck period starts.
func (g *GRPCServer) Serve(ln net.Listener) error {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if g.s.Ready() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	g.setHealth(st)
	if g.s.InLameDuck() {
		g.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	}
	err := g.gs.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop drains (see Drain) and then closes the connections left.
func (g *GRPCServer) Stop(ctx context.Context) error {
	err := g.Drain(ctx)
	g.Close()
	return err
}

// Drain turns the health service to NOT_SERVING, stops accepting (a
// GOAWAY tells clients to go elsewhere), and waits for the calls and
// streams in flight until ctx ends. It leaves the connections of calls
// still running open: the owner cuts them (Server.Cut) and then calls
// Close.
func (g *GRPCServer) Drain(ctx context.Context) error {
	g.health.Shutdown()
	g.s.endStreams()
	g.drainOnce.Do(func() {
		g.drained = make(chan struct{})
		go func() {
			g.gs.GracefulStop()
			close(g.drained)
		}()
	})
	// Once every call has ended, what is left is responses grpc-go has not
	// yet sent to clients that do not read them: they get drainFlush, then
	// their connections are closed.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var idle time.Time
	for {
		select {
		case <-g.drained:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("server: gRPC drain: %w", ctx.Err())
		case now := <-tick.C:
			g.calls.mu.Lock()
			calls := g.calls.calls
			g.calls.mu.Unlock()
			switch {
			case calls > 0:
				idle = time.Time{}
			case idle.IsZero():
				idle = now
			case now.Sub(idle) >= drainFlush:
				g.s.log.Warn("closed gRPC connections whose clients had not read their last responses", "after", drainFlush)
				g.gs.Stop()
				<-g.drained
				return nil
			}
		}
	}
}

// drainFlush is how long, once every call has ended, a drain waits for
// clients to read the responses left, before it closes their connections.
const drainFlush = 2 * time.Second

// Close closes every connection at once, ending the calls left.
func (g *GRPCServer) Close() {
	g.gs.Stop()
	if g.drained != nil {
		<-g.drained
	}
}

// recoverUnary turns a handler's panic into INTERNAL; the server goes on.
func (g *GRPCServer) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			g.s.log.Error("panic serving gRPC call", "method", info.FullMethod, "panic", v, "stack", string(debug.Stack()))
			g.s.metrics.panics.WithLabelValues("").Inc()
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
	}()
	return h(ctx, req)
}

// recoverStream is recoverUnary for streams.
func (g *GRPCServer) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			g.s.log.Error("panic serving gRPC stream", "method", info.FullMethod, "panic", v, "stack", string(debug.Stack()))
			g.s.metrics.panics.WithLabelValues("").Inc()
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	return h(srv, ss)
}

// CodeOf maps an error to the gRPC status code that answers it (see
// wire.CodeOf, the gRPC counterpart of StatusOf).
func CodeOf(err error) codes.Code { return wire.CodeOf(err) }

// grpcError is err as a gRPC status with its message (cut to
// maxErrorBytes); UNAVAILABLE carries a retry delay, as REST's 503 has
// Retry-After.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := CodeOf(err)
	if code == codes.Unavailable {
		return retryLater(err)
	}
	return status.Error(code, errorText(err))
}

// errorText is err's message cut to maxErrorBytes.
func errorText(err error) string {
	msg := err.Error()
	if len(msg) > maxErrorBytes {
		msg = msg[:maxErrorBytes] + "..."
	}
	return msg
}

// grpcService implements GRPCInferenceService on a Server.
type grpcService struct {
	pb.UnimplementedGRPCInferenceServiceServer
	s *Server
}

func (g *grpcService) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: g.s.Live()}, nil
}

func (g *grpcService) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: g.s.Ready()}, nil
}

// ModelReady answers NOT_FOUND for a model or version not served, as REST
// answers 404.
func (g *grpcService) ModelReady(_ context.Context, req *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	if _, err := g.s.lookup(req.GetName(), req.GetVersion()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.ModelReadyResponse{Ready: g.s.serving()}, nil
}

func (g *grpcService) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	md := g.s.Metadata()
	return &pb.ServerMetadataResponse{Name: md.Name, Version: md.Version, Extensions: md.Extensions}, nil
}

// ModelMetadata answers the KServe fields and puts rnnserve's own model
// description under properties["rnn"] as JSON: our own field, which
// clients built from Triton's or KServe's protos do not have (they read
// the same from ModelConfig's parameters, facts.go).
func (g *grpcService) ModelMetadata(_ context.Context, req *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	m, err := g.s.lookup(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	meta, _ := m.base().description()
	md := &meta
	out := &pb.ModelMetadataResponse{Name: md.Name, Versions: md.Versions, Platform: md.Platform,
		Inputs: tensorMetadata(md.Inputs), Outputs: tensorMetadata(md.Outputs)}
	if rnn, err := json.Marshal(md.RNN); err == nil {
		out.Properties = map[string]string{"rnn": string(rnn)}
	}
	return out, nil
}

func tensorMetadata(ts []api.TensorMetadata) []*pb.ModelMetadataResponse_TensorMetadata {
	out := make([]*pb.ModelMetadataResponse_TensorMetadata, len(ts))
	for i, t := range ts {
		out[i] = &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
	}
	return out
}

// ModelInfer runs an inference request, or, when it has a text_input or
// prompt_tokens input, a whole generation answered in one response.
func (g *grpcService) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	received := time.Now()
	if wire.IsGenerate(req) {
		return g.generateWhole(ctx, req, received)
	}
	var out *pb.ModelInferResponse
	err := g.infer(ctx, req, received, func(resp *Response) error {
		out = wire.ToGRPC(resp)
		callOf(ctx).owe(int64(proto.Size(out)))
		return nil
	})
	if err != nil {
		return nil, grpcError(err)
	}
	return out, nil
}

// infer decodes and runs one inference request and hands its response to
// answer. The message, the tensors decoded from it and the response are
// held in the memory budget (grpclimits.go) until answer returns; answer
// hands the response's bytes on to its connection (grpcCall.owe) before
// grpc-go sends them.
func (g *grpcService) infer(ctx context.Context, req *pb.ModelInferRequest, received time.Time, answer func(*Response) error) error {
	r := &Request{Protocol: protocolGRPC, Received: received}
	res, err := g.messageReservation(ctx, req)
	defer res.Release()
	r.Charge = res.Grow
	var id string
	if err == nil {
		id, err = sequenceIDFrom(metadata.ValueFromIncomingContext(ctx, SequenceMetadata), sequenceMetadataName)
	}
	if err == nil {
		err = withSequenceID(r, id, sequenceMetadataName, func() error {
			return wire.FromGRPC(req, r, &wire.TensorMemory{Limit: 2 * g.s.opts.MaxBodyBytes, Charge: res.Grow})
		})
	}
	if err != nil {
		g.s.Rejected(req.GetModelName(), req.GetModelVersion(), "infer", protocolGRPC, received, err)
		return err
	}
	resp, err := g.s.Infer(ctx, r)
	if err != nil {
		return err
	}
	return answer(resp)
}

// messageReservation is the reservation a call's message was read under,
// or, for a request of a stream (read without one) or a call made
// without the transport, a new one charged the message's size.
func (g *grpcService) messageReservation(ctx context.Context, req *pb.ModelInferRequest) (*limits.Reservation, error) {
	res := callOf(ctx).takeReservation(ctx, g.s.budget)
	if res.Held() > 0 {
		return res, nil
	}
	n := int64(proto.Size(req))
	res.Small = n <= limits.SmallRequest
	return res, res.Grow(n)
}

// decodeGenerate decodes a generation request. Its message is taken from
// the memory budget while it decodes (a generation holds no more than its
// prompt after that).
func (g *grpcService) decodeGenerate(ctx context.Context, req *pb.ModelInferRequest, received time.Time) (*wire.GRPCGenerate, error) {
	gen := &wire.GRPCGenerate{GenerateRequest: GenerateRequest{Protocol: protocolGRPC, Received: received}}
	res, err := g.messageReservation(ctx, req)
	defer res.Release()
	if err == nil {
		err = noSequenceID(metadata.ValueFromIncomingContext(ctx, SequenceMetadata), sequenceMetadataName)
	}
	if err == nil {
		err = wire.GenerateFromGRPC(req, gen, &wire.TensorMemory{Limit: 2 * g.s.opts.MaxBodyBytes, Charge: res.Grow})
	}
	if err != nil {
		g.s.Rejected(req.GetModelName(), req.GetModelVersion(), "generate", protocolGRPC, received, err)
		return nil, err
	}
	return gen, nil
}

// generateWhole runs a generation and answers all of it at once: the
// text, the token ids and their log-probabilities, and the finish reason
// as a response parameter.
func (g *grpcService) generateWhole(ctx context.Context, req *pb.ModelInferRequest, received time.Time) (*pb.ModelInferResponse, error) {
	gen, err := g.decodeGenerate(ctx, req, received)
	if err != nil {
		return nil, grpcError(err)
	}
	// The generation's memory is held until its answer is built.
	share := g.s.budget.Reserve(ctx)
	defer share.Release()
	gen.Charge = g.s.generationCharge(share)
	var text []byte
	var tokens []GenerateToken
	res, err := g.s.Generate(ctx, &gen.GenerateRequest, func(t GenerateToken) error {
		text = append(text, t.Text...)
		tokens = append(tokens, t)
		return ctx.Err()
	})
	if err == nil {
		err = res.Err // cut short after its first token
	}
	if err != nil {
		return nil, grpcError(err)
	}
	out := gen.Response(version, text, tokens)
	out.Parameters = map[string]*pb.InferParameter{wire.ParamFinishReason: wire.ParamToGRPC(res.Reason)}
	return out, nil
}

// ModelStreamInfer serves a stream of requests. They run one after another
// in the order they arrive (open several streams for concurrency), so the
// requests of a sequence keep their order. An inference request gets one
// response; a generation request gets a response per token as it is
// generated. Every response has the parameter triton_final_response, true
// on the last one of its request; a request with the parameter
// triton_enable_empty_final_response true gets an empty last response
// instead, after its tokens. A request that fails gets error_message and
// the stream goes on. When the server drains (the end of the lame-duck
// period), a stream answers the request it is running, if any, and any
// that had fully arrived, then sends a last response whose error_message
// says the server is shutting down, and ends (status OK).
func (g *grpcService) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	ctx := stream.Context()
	type received struct {
		req *pb.ModelInferRequest
		err error
	}
	// Recv runs on its own goroutine, one request at a time when asked,
	// so that a stream waiting for its next request can still be ended.
	ask, got := make(chan struct{}), make(chan received, 1)
	defer close(ask)
	go func() {
		for range ask {
			req, err := stream.Recv()
			got <- received{req, err}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-g.s.streamsEnd:
			return g.endStream(stream)
		default:
		}
		ask <- struct{}{}
		var r received
		select {
		case r = <-got:
		case <-g.s.streamsEnd:
			select {
			case r = <-got: // it arrived as the drain began: answer it
			default:
				return g.endStream(stream)
			}
		}
		if r.err == io.EOF {
			return nil
		}
		if r.err != nil {
			return r.err
		}
		if err := g.streamOne(ctx, stream, r.req, time.Now()); err != nil {
			return err // the client went away
		}
	}
}

// endStream ends a stream as the server drains: a last response says so,
// and the stream ends with OK. A client that has left earlier responses
// unread for drainFlush cannot be sent it: the stream ends with
// UNAVAILABLE instead (and the drain closes its connection).
func (g *grpcService) endStream(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	const msg = "server shutting down: this stream ends here; open a new one to go on (on another replica)"
	sent := make(chan error, 1)
	go func() { sent <- stream.Send(&pb.ModelStreamInferResponse{ErrorMessage: msg}) }()
	select {
	case <-sent:
		return nil
	case <-time.After(drainFlush):
		return retryLater(fmt.Errorf("%w: %s (its client had not read the responses before it)", ErrDraining, msg))
	}
}

// streamOne answers one request of a stream. It returns an error only when
// sending failed.
func (g *grpcService) streamOne(ctx context.Context, stream pb.GRPCInferenceService_ModelStreamInferServer, req *pb.ModelInferRequest, received time.Time) error {
	fail := func(err error) error {
		return stream.Send(&pb.ModelStreamInferResponse{ErrorMessage: errorText(err)})
	}
	emptyFinal := false
	if p, ok := req.GetParameters()[wire.ParamEmptyFinal]; ok {
		b, isBool := p.GetParameterChoice().(*pb.InferParameter_BoolParam)
		if !isBool {
			return fail(infer.BadRequest("parameter %s must be a boolean", wire.ParamEmptyFinal))
		}
		emptyFinal = b.BoolParam
		delete(req.Parameters, wire.ParamEmptyFinal)
	}
	send := func(r *pb.ModelInferResponse, final bool) error {
		if r.Parameters == nil {
			r.Parameters = map[string]*pb.InferParameter{}
		}
		r.Parameters[wire.ParamFinal] = wire.ParamToGRPC(final)
		return stream.Send(&pb.ModelStreamInferResponse{InferResponse: r})
	}
	if !wire.IsGenerate(req) {
		var sendErr error
		err := g.infer(ctx, req, received, func(resp *Response) error {
			out := wire.ToGRPC(resp)
			callOf(ctx).owe(int64(proto.Size(out)))
			if emptyFinal {
				if sendErr = send(out, false); sendErr != nil {
					return sendErr
				}
				sendErr = send(&pb.ModelInferResponse{ModelName: resp.Model, ModelVersion: resp.Version, Id: resp.ID}, true)
				return sendErr
			}
			sendErr = send(out, true)
			return sendErr
		})
		switch {
		case sendErr != nil:
			return sendErr
		case err != nil:
			return fail(err)
		}
		return nil
	}
	gen, err := g.decodeGenerate(ctx, req, received)
	if err != nil {
		return fail(err)
	}
	// Without an empty final response the last token's response carries
	// the final flag, so each token is held until the next one (or the
	// end) shows it was not the last.
	var held *GenerateToken
	var sendErr error
	res, err := g.s.Generate(ctx, &gen.GenerateRequest, func(t GenerateToken) error {
		if emptyFinal {
			sendErr = send(gen.Response(version, t.Text, []GenerateToken{t}), false)
			return sendErr
		}
		if held != nil {
			if sendErr = send(gen.Response(version, held.Text, []GenerateToken{*held}), false); sendErr != nil {
				return sendErr
			}
		}
		held = &t
		return nil
	})
	if sendErr != nil {
		return sendErr
	}
	if err == nil {
		err = res.Err // cut short after its first token: the stream gets an error_message last
	}
	if err != nil {
		return fail(err)
	}
	last := &pb.ModelInferResponse{ModelName: gen.Model, ModelVersion: version, Id: gen.ID}
	if held != nil {
		last = gen.Response(version, held.Text, []GenerateToken{*held})
	}
	last.Parameters = map[string]*pb.InferParameter{wire.ParamFinishReason: wire.ParamToGRPC(res.Reason)}
	return send(last, true)
}

// ModelConfig answers the model's configuration in Triton's schema. Its
// one scheduler is sequence_batching for a sequence model (which also
// batches requests, step by step) and dynamic_batching for a tree model;
// rnnserve's model facts are under parameters["rnn"] and ["rnnserve"] as
// JSON (facts.go).
func (g *grpcService) ModelConfig(_ context.Context, req *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	m, err := g.s.lookup(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	_, config := m.base().description()
	c := &config
	out := &pb.ModelConfig{Name: c.Name, Platform: c.Platform, Backend: c.Backend, MaxBatchSize: int32(c.MaxBatchSize)}
	for _, t := range c.Input {
		out.Input = append(out.Input, &pb.ModelInput{Name: t.Name, DataType: dataType(t.DataType), Dims: t.Dims, Reshape: reshape(t.Reshape), Optional: t.Optional})
	}
	for _, t := range c.Output {
		out.Output = append(out.Output, &pb.ModelOutput{Name: t.Name, DataType: dataType(t.DataType), Dims: t.Dims, Reshape: reshape(t.Reshape)})
	}
	for _, ig := range c.InstanceGroup {
		out.InstanceGroup = append(out.InstanceGroup, &pb.ModelInstanceGroup{Count: int32(ig.Count),
			Kind: pb.ModelInstanceGroup_Kind(pb.ModelInstanceGroup_Kind_value[ig.Kind])})
	}
	switch {
	case c.SequenceBatching != nil:
		out.SchedulingChoice = &pb.ModelConfig_SequenceBatching{SequenceBatching: &pb.ModelSequenceBatching{
			MaxSequenceIdleMicroseconds: c.SequenceBatching.MaxSequenceIdleMicroseconds}}
	case c.DynamicBatching != nil:
		out.SchedulingChoice = &pb.ModelConfig_DynamicBatching{DynamicBatching: &pb.ModelDynamicBatching{
			MaxQueueDelayMicroseconds: c.DynamicBatching.MaxQueueDelayMicroseconds}}
	}
	out.Parameters = map[string]*pb.ModelParameter{}
	for k, v := range c.Parameters {
		out.Parameters[k] = &pb.ModelParameter{StringValue: v.StringValue}
	}
	return &pb.ModelConfigResponse{Config: out}, nil
}

// dataType is the enum value of a configuration type name (TYPE_FP32).
func dataType(name string) pb.DataType {
	return pb.DataType(pb.DataType_value[name])
}

func reshape(r *api.Reshape) *pb.ModelTensorReshape {
	if r == nil {
		return nil
	}
	return &pb.ModelTensorReshape{Shape: r.Shape}
}

// ModelStatistics answers Triton's statistics of one model or, with no
// name, of every model.
func (g *grpcService) ModelStatistics(_ context.Context, req *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	st, err := g.s.Statistics(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.ModelStatisticsResponse{}
	dur := func(d api.StatDuration) *pb.StatisticDuration { return &pb.StatisticDuration{Count: d.Count, Ns: d.Ns} }
	for _, m := range st.ModelStats {
		is := &m.InferenceStats
		ms := &pb.ModelStatistics{Name: m.Name, Version: m.Version, LastInference: m.LastInference,
			InferenceCount: m.InferenceCount, ExecutionCount: m.ExecutionCount,
			InferenceStats: &pb.InferStatistics{Success: dur(is.Success), Fail: dur(is.Fail), Queue: dur(is.Queue),
				ComputeInput: dur(is.ComputeInput), ComputeInfer: dur(is.ComputeInfer), ComputeOutput: dur(is.ComputeOutput),
				CacheHit: dur(is.CacheHit), CacheMiss: dur(is.CacheMiss)}}
		for _, b := range m.BatchStats {
			ms.BatchStats = append(ms.BatchStats, &pb.InferBatchStatistics{BatchSize: b.BatchSize,
				ComputeInput: dur(b.ComputeInput), ComputeInfer: dur(b.ComputeInfer), ComputeOutput: dur(b.ComputeOutput)})
		}
		out.ModelStats = append(out.ModelStats, ms)
	}
	return out, nil
}

// checkRepositoryName refuses a repository other than the server's one.
func checkRepositoryName(name string) error {
	if name != "" && name != "models" {
		return infer.BadRequest("repository %q (the server has one, \"models\")", infer.Clip(name))
	}
	return nil
}

// grpcControlCall is the repository API call of ctx, for authorize.
func grpcControlCall(ctx context.Context, op string) controlCall {
	c := controlCall{op: op, protocol: protocolGRPC}
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		c.bearer = v[0]
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.remote = p.Addr.String()
	}
	return c
}

func (g *grpcService) RepositoryIndex(ctx context.Context, req *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	if err := g.s.authorize(grpcControlCall(ctx, "index")); err != nil {
		return nil, grpcError(err)
	}
	if err := checkRepositoryName(req.GetRepositoryName()); err != nil {
		return nil, grpcError(err)
	}
	idx, err := g.s.RepositoryIndex(req.GetReady())
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.RepositoryIndexResponse{}
	for _, m := range idx {
		out.Models = append(out.Models, &pb.RepositoryIndexResponse_ModelIndex{Name: m.Name, Version: m.Version, State: m.State, Reason: m.Reason})
	}
	return out, nil
}

// RepositoryModelLoad loads a model from the repository; it takes no
// parameters (no configuration override, no files sent with the call).
func (g *grpcService) RepositoryModelLoad(ctx context.Context, req *pb.RepositoryModelLoadRequest) (*pb.RepositoryModelLoadResponse, error) {
	if err := g.s.authorize(grpcControlCall(ctx, "load")); err != nil {
		return nil, grpcError(err)
	}
	if err := checkRepositoryName(req.GetRepositoryName()); err != nil {
		return nil, grpcError(err)
	}
	if len(req.GetParameters()) > 0 {
		return nil, grpcError(infer.BadRequest("load parameters (config override, file upload) are not supported: the model loads from the repository as it is"))
	}
	if err := g.s.Load(req.GetModelName()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.RepositoryModelLoadResponse{}, nil
}

// RepositoryModelUnload unloads a model; it accepts unload_dependents
// (rnnserve's models have none).
func (g *grpcService) RepositoryModelUnload(ctx context.Context, req *pb.RepositoryModelUnloadRequest) (*pb.RepositoryModelUnloadResponse, error) {
	if err := g.s.authorize(grpcControlCall(ctx, "unload")); err != nil {
		return nil, grpcError(err)
	}
	if err := checkRepositoryName(req.GetRepositoryName()); err != nil {
		return nil, grpcError(err)
	}
	for key, v := range req.GetParameters() {
		if _, ok := v.GetParameterChoice().(*pb.ModelRepositoryParameter_BoolParam); key != "unload_dependents" || !ok {
			return nil, grpcError(infer.BadRequest("unload: unknown parameter %q (known: unload_dependents, a bool)", infer.Clip(key)))
		}
	}
	if err := g.s.Unload(req.GetModelName()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.RepositoryModelUnloadResponse{}, nil
}
