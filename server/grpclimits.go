package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // the proto codec boundedCodec wraps
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"rnnserve/server/internal/connlimit"
	"rnnserve/server/internal/limits"
)

// What a gRPC client can make the server hold, and how it is bounded.
//
// grpc-go reads a message whole once a handler asks for it (it learns the
// length from the message's 5-byte prefix and opens the call's
// flow-control window to that length at once), and gives no hook between
// learning the length and reading the bytes. So a message cannot be
// charged as it arrives, as a REST body is. Instead:
//
//   - Before a call's handler asks for its message, the transport holds at
//     most the call's static window (grpcStreamWindow) of it, and its
//     metadata (grpcMaxHeaderList).
//   - Calls are counted when the transport opens them (the InTapHandle,
//     before a handler goroutine exists): at most Options.GRPC.MaxCalls
//     in all, except that a connection below its fair share of that cap
//     always gets a call, so a flood of calls on some connections cannot
//     lock another out; and at most MaxInferStreams ModelStreamInfer
//     streams. A call over either cap is refused at once with
//     UNAVAILABLE and a retry delay (errdetails.RetryInfo).
//   - A unary call's message is read under a reservation of the most it
//     can be (max_body_bytes; limits.SmallRequest when every call open on
//     its connection has announced a small message,
//     connlimit.Conn.AnnouncedSmall), taken from the memory budget before
//     the read, waiting like any request; once read it is settled to its
//     size. Waiting reads of a connection whose every message so far was
//     small (64 KiB or less) come before the others', and may use the
//     budget's share for small requests (connlimit.Conn.Trusted), so a
//     known small client is not queued behind a flood of large messages.
//   - A read must keep up the minimum rate (Options.MinBodyRate, measured
//     on the bytes its connection delivers) and end within
//     Options.GRPC.FirstMessageTimeout; one that does not is ended
//     (DEADLINE_EXCEEDED), gives its reservation back, and its connection
//     loses its place among the small clients.
//   - A ModelStreamInfer stream may wait for its next request for as long
//     as it likes, so its reads cannot hold a reservation: each request is
//     charged once read, and the transport may hold one unread request
//     (up to max_body_bytes) per stream beyond the budget while it
//     arrives: at most MaxInferStreams of them. The first request of a
//     stream must arrive as a unary call's does.
//   - After a handler returns, grpc-go holds its response until the client
//     reads it, with no write deadline; a client that stops reading is
//     found by the keepalive ping (KeepaliveTime, then
//     grpcKeepaliveTimeout) and its connection closed.
//   - A message is decoded only if its repeated and map fields other than
//     tensor data hold at most maxMessageElements elements in all
//     (boundedCodec): 2 bytes of an empty input on the wire are a pointer
//     and a 120-byte struct once decoded, so the reservation above, three
//     times the message, would not hold what such a message decodes to.

// grpcCall is a call's state from the moment the transport opens it.
type grpcCall struct {
	conn   *connlimit.Conn // nil on a listener the server did not wrap
	start  time.Time
	stream bool // a client stream: ModelStreamInfer, reflection
	// res is the reservation its (last) message was read under, for the
	// handler to charge the decoded tensors to and release; handed is the
	// one the handler holds (owe takes the response's bytes from it).
	mu     sync.Mutex
	res    *limits.Reservation
	handed *limits.Reservation
}

type callKey struct{}

// callOf is the call state of a handler's context, or nil (a handler
// called without the transport, as benchmarks do).
func callOf(ctx context.Context) *grpcCall {
	c, _ := ctx.Value(callKey{}).(*grpcCall)
	return c
}

// takeReservation hands the reservation of the call's message to its
// handler, or a new one of b (nil call, or none taken; nil b: nil).
func (c *grpcCall) takeReservation(ctx context.Context, b *limits.Budget) *limits.Reservation {
	if c == nil {
		if b == nil {
			return nil
		}
		return b.Reserve(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	res := c.res
	c.res = nil
	if res == nil && b != nil {
		res = b.Reserve(ctx)
	}
	if b != nil {
		c.handed = res
	}
	return res
}

// owe moves n bytes of the call's share of the budget to its connection:
// a response grpc-go is about to send, which it holds until the client
// reads it, and which is released as the connection writes bytes (or
// closes). It is taken from the reservation the handler holds, so it is
// already charged.
func (c *grpcCall) owe(n int64) {
	if c == nil || c.conn == nil || n <= 0 {
		return
	}
	c.mu.Lock()
	res := c.handed
	c.mu.Unlock()
	if res == nil {
		return
	}
	c.conn.Owe(res.Hand(n))
}

// connection is the call's connection: nil for a nil call (a handler
// called without the transport) and on a listener the server did not
// wrap, whose methods answer as for a connection nothing is known of.
func (c *grpcCall) connection() *connlimit.Conn {
	if c == nil {
		return nil
	}
	return c.conn
}

// grpcCalls counts the calls open, for the caps of the tap.
type grpcCalls struct {
	maxCalls, maxStreams int

	mu      sync.Mutex
	calls   int
	streams int
}

// errTooManyCalls refuses a call over the caps (UNAVAILABLE).
var errTooManyCalls = errors.New("server busy: gRPC calls open at the cap")

// tap admits a call as the transport opens it (grpc.InTapHandle): it
// must not block, since it runs on the connection's reading goroutine.
func (g *GRPCServer) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	var conn *connlimit.Conn
	if p, ok := peer.FromContext(ctx); ok {
		conn = g.s.conns.Of(p.Addr, p.LocalAddr)
	}
	stream := g.clientStreams[info.FullMethodName]
	gc := &g.calls
	gc.mu.Lock()
	fair := 1
	if n := g.s.conns.Open(connlimit.GRPC); n > 0 {
		fair = max(1, gc.maxCalls/n)
	}
	switch {
	case stream && gc.streams >= gc.maxStreams:
		gc.mu.Unlock()
		return nil, retryLater(fmt.Errorf("server busy: %d ModelStreamInfer (or reflection) streams open, the cap (server.grpc.max_infer_streams)", gc.streams))
	case gc.calls >= gc.maxCalls && (conn == nil || conn.Calls() >= fair):
		gc.mu.Unlock()
		return nil, retryLater(fmt.Errorf("%w (%d, server.grpc.max_calls)", errTooManyCalls, gc.calls))
	}
	gc.calls++
	if stream {
		gc.streams++
	}
	gc.mu.Unlock()
	conn.OpenCall()
	context.AfterFunc(ctx, func() {
		gc.mu.Lock()
		gc.calls--
		if stream {
			gc.streams--
		}
		gc.mu.Unlock()
		conn.CloseCall()
	})
	return context.WithValue(ctx, callKey{}, &grpcCall{conn: conn, start: time.Now(), stream: stream}), nil
}

// registrar registers services on the gRPC server with their messages
// read under the bounds above (wrap): every service goes through it.
type registrar struct{ g *GRPCServer }

func (r registrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	r.g.gs.RegisterService(r.g.wrap(desc), impl)
}

func (r registrar) GetServiceInfo() map[string]grpc.ServiceInfo { return r.g.gs.GetServiceInfo() }

// wrap is desc with every handler reading its messages under the bounds
// of this file: a unary call's message and a server stream's one request
// under a reservation (readOne), a client stream's first message within
// the first-message timeout and the minimum rate (clientStream).
func (g *GRPCServer) wrap(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	d := *desc
	d.Methods = append([]grpc.MethodDesc(nil), desc.Methods...)
	for i := range d.Methods {
		h := d.Methods[i].Handler
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(m any) error { return g.readOne(ctx, dec, m) }, ic)
		}
	}
	d.Streams = append([]grpc.StreamDesc(nil), desc.Streams...)
	for i := range d.Streams {
		h := d.Streams[i].Handler
		if d.Streams[i].ClientStreams {
			g.clientStreams["/"+d.ServiceName+"/"+d.Streams[i].StreamName] = true
			d.Streams[i].Handler = func(srv any, ss grpc.ServerStream) error {
				return h(srv, &clientStream{ServerStream: ss, g: g})
			}
			continue
		}
		d.Streams[i].Handler = func(srv any, ss grpc.ServerStream) error {
			return h(srv, &oneRequest{ServerStream: ss, g: g})
		}
	}
	return &d
}

// oneRequest reads a server stream's request as a unary call's message.
type oneRequest struct {
	grpc.ServerStream
	g *GRPCServer
}

func (s *oneRequest) RecvMsg(m any) error {
	return s.g.readOne(s.Context(), s.ServerStream.RecvMsg, m)
}

// clientStream reads a client stream's first message within the
// first-message timeout and the minimum rate, and the others as they
// come; none under a reservation (the handler charges each once read).
type clientStream struct {
	grpc.ServerStream
	g     *GRPCServer
	later bool
}

func (s *clientStream) RecvMsg(m any) error {
	ctx := s.Context()
	call := callOf(ctx)
	var err error
	// Not under a reservation: as much room as a unary call's read of
	// a message at the limit holds.
	room := readReservation * s.g.s.opts.MaxBodyBytes
	if s.later {
		_, _, err = decodeInto(s.ServerStream.RecvMsg, m, room, nil)
	} else {
		s.later = true
		_, _, err = s.g.receive(ctx, call, s.ServerStream.RecvMsg, m, room, nil)
	}
	if err == nil {
		if pm, ok := m.(proto.Message); ok {
			call.connection().SawMessage(int64(proto.Size(pm)))
		}
	}
	return err
}

// readOne reads a call's message into m under a reservation of
// max_body_bytes, settled to the message's size once read and left in the
// call for its handler (grpcCall.takeReservation); what the handler does
// not take is given back when the call ends.
func (g *GRPCServer) readOne(ctx context.Context, dec func(any) error, m any) error {
	call := callOf(ctx)
	conn := call.connection()
	if slots := conn.ReadSlots(); slots != nil {
		// A connection reads at most connlimit.ReadsPerConn messages at once.
		wait := time.NewTimer(time.Until(call.start.Add(g.s.opts.GRPC.FirstMessageTimeout)))
		select {
		case slots <- struct{}{}:
			wait.Stop()
			defer func() { <-slots }()
		case <-wait.C:
			return status.Errorf(codes.DeadlineExceeded, "the message did not arrive within %v of the call (server.grpc.first_message_timeout): its connection was reading %d others", g.s.opts.GRPC.FirstMessageTimeout, connlimit.ReadsPerConn)
		case <-ctx.Done():
			wait.Stop()
			return grpcError(context.Cause(ctx))
		}
	}
	conn.AwaitAnnouncement(ctx)
	res := g.s.budget.Reserve(ctx)
	res.Trusted = conn.Trusted() // waits first, and may use the share for small requests
	want := readReservation * g.s.opts.MaxBodyBytes
	if conn.AnnouncedSmall() {
		want = readReservation * min(limits.SmallRequest, g.s.opts.MaxBodyBytes)
	}
	if err := res.Grow(want); err != nil {
		res.Release()
		return grpcError(err)
	}
	grow := func(n int64) (*limits.Reservation, error) {
		more := g.s.budget.Reserve(ctx)
		if err := more.Grow(n); err != nil {
			return nil, err
		}
		return more, nil
	}
	extra, more, err := g.receive(ctx, call, dec, m, want, grow)
	if err != nil {
		res.Release()
		return err
	}
	res.Absorb(more)
	var n int64
	if pm, ok := m.(proto.Message); ok {
		n = int64(proto.Size(pm))
	}
	res.Settle(n + extra)
	res.Small, res.Trusted = n <= limits.SmallRequest, false
	conn.SawMessage(n)
	if call == nil {
		res.Release()
		return nil
	}
	call.mu.Lock()
	call.res = res
	call.mu.Unlock()
	context.AfterFunc(ctx, func() { call.takeReservation(ctx, nil).Release() })
	return nil
}

// receive reads one message with dec, on another goroutine so that a
// read that falls under the minimum rate, or past the first-message
// timeout, can be given up: the call then ends with DEADLINE_EXCEEDED,
// which cancels the read.
func (g *GRPCServer) receive(ctx context.Context, call *grpcCall, dec func(any) error, m any, room int64, grow func(int64) (*limits.Reservation, error)) (int64, *limits.Reservation, error) {
	type result struct {
		extra int64
		more  *limits.Reservation
		err   error
	}
	done := make(chan result, 1)
	go func() {
		extra, more, err := decodeInto(dec, m, room, grow)
		done <- result{extra, more, err}
	}()
	// A read given up on still ends (the call's end resets its stream);
	// what its decoding took from the budget is given back then.
	abandon := func(err error) (int64, *limits.Reservation, error) {
		go func() { (<-done).more.Release() }()
		return 0, nil, err
	}
	start := time.Now()
	conn := call.connection()
	base := conn.Received()
	deadline := start.Add(g.s.opts.GRPC.FirstMessageTimeout)
	if call != nil {
		deadline = call.start.Add(g.s.opts.GRPC.FirstMessageTimeout)
	}
	rate := g.s.opts.MinBodyRate
	trusted := conn.Trusted()
	tick := time.NewTimer(min(time.Until(deadline), rateCheck))
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			return r.extra, r.more, r.err
		case <-ctx.Done():
			return abandon(grpcError(context.Cause(ctx)))
		case now := <-tick.C:
			elapsed := now.Sub(start)
			if !now.Before(deadline) {
				conn.Distrust()
				return abandon(status.Errorf(codes.DeadlineExceeded, "the message did not arrive within %v of the call (server.grpc.first_message_timeout)", g.s.opts.GRPC.FirstMessageTimeout))
			}
			// A known small client is not held to the rate: its message
			// is in already, and a read that has not returned is a
			// server short of processor time, not a client stalling.
			if conn != nil && !trusted {
				got := conn.Received() - base
				if float64(got) < float64(rate)*elapsed.Seconds()-limits.Chunk {
					conn.Distrust()
					return abandon(grpcError(fmt.Errorf("%w: its connection delivered %d bytes in %v, under the minimum of %d bytes a second (min_body_rate)",
						ErrSlowBody, got, elapsed.Round(time.Millisecond), rate)))
				}
			}
			tick.Reset(min(time.Until(deadline), rateCheck))
		}
	}
}

// readReservation is what a read takes from the budget before it starts,
// in messages at the limit: grpc-go holds a message three times over as it
// decodes it (the frames as they arrived, the contiguous copy its proto
// codec makes of them, the decoded message), and frees the first two once
// decoded, when the reservation is settled to the message's size.
const readReservation = 3

// rateCheck is how often a read's progress is checked.
const rateCheck = 250 * time.Millisecond

// maxMessageElements bounds the elements of a message's repeated and map
// fields other than tensor data: inputs, outputs, dimensions, parameters
// (REST's bound, wire.maxElements).
const maxMessageElements = 4096

// boundedCodec is grpc-go's proto codec, but a message is sized from its
// wire bytes before it is decoded, and refused where it would decode to
// more than its bounds:
//
//   - its repeated and map fields other than tensor data
//     (InferTensorContents) may hold maxMessageElements elements in all;
//   - it decodes within what its read holds of the budget: grpc-go
//     holds the frames and the contiguous copy this codec makes beside
//     the decoded message, which is its wire size plus what its tensor
//     contents and repeated messages take beyond their wire bytes (a
//     packed varint of one byte is an int64 of eight, an empty BYTES
//     element of two bytes a slice of 24, an empty input of two a struct
//     of some 128). A read under a reservation takes what it lacks from
//     the budget before the message is decoded; one without (a client
//     stream's) is refused beyond readReservation messages at the limit.
//
// grpc-go answers a codec's error with INTERNAL at once, so a refused
// message is left empty, with no error, and the refusal kept in the
// read's decodeState for its reader (decodeInto) to answer with the
// status that fits.
type boundedCodec struct{ encoding.CodecV2 }

// decodeState is one read's exchange with boundedCodec, kept in decoding
// under the message's pointer while the read runs.
type decodeState struct {
	room int64 // the bytes the read holds as it decodes
	// grow takes n more bytes from the budget for the read (nil: none
	// may be taken).
	grow  func(n int64) (*limits.Reservation, error)
	more  *limits.Reservation // what grow took
	extra int64               // bytes the message takes decoded beyond its wire size
	err   error               // the codec's refusal
}

var decoding sync.Map // message (pointer) -> *decodeState

func newBoundedCodec() boundedCodec {
	return boundedCodec{encoding.GetCodecV2("proto")}
}

func (c boundedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	sz := messageSize{}
	err := sz.count(b, m.ProtoReflect().Descriptor(), 0)
	st, _ := decoding.Load(v)
	ds, _ := st.(*decodeState)
	if need := readReservation*int64(len(b)) + sz.extra; err == nil && ds != nil && need > ds.room {
		if ds.grow == nil {
			err = fmt.Errorf("%w: the message of %d bytes decodes to %d more (its tensor contents and repeated messages), %d bytes in all with grpc-go's copies, over the %d a message may take",
				ErrTooLarge, len(b), sz.extra, need, ds.room)
		} else {
			ds.more, err = ds.grow(need - ds.room)
		}
	}
	if ds != nil {
		ds.extra = sz.extra
	}
	if err != nil {
		if ds == nil {
			return err // a read decodeInto does not make: INTERNAL
		}
		ds.err = err
		return nil
	}
	return proto.Unmarshal(b, m)
}

// decodeInto reads m with dec under boundedCodec's bounds, holding room
// bytes of the budget as it decodes and taking what it lacks with grow
// (nil: refused instead). It returns what m takes decoded beyond its
// wire size and what grow took. Every read of a handler goes through it
// (receive, clientStream).
func decodeInto(dec func(any) error, m any, room int64, grow func(int64) (*limits.Reservation, error)) (int64, *limits.Reservation, error) {
	ds := &decodeState{room: room, grow: grow}
	decoding.Store(m, ds)
	err := dec(m)
	decoding.Delete(m)
	if ds.err != nil {
		err = grpcError(ds.err)
	}
	if err != nil {
		ds.more.Release()
		return 0, nil, err
	}
	return ds.extra, ds.more, nil
}

// messageSize is what a message's wire bytes say of it decoded: the
// elements of its repeated and map fields besides tensor contents, and
// what it takes decoded beyond its wire bytes.
type messageSize struct {
	elements int
	extra    int64
}

// messageElementBytes is about what one element of a repeated message
// field takes decoded besides its fields (ModelInferRequest's input
// tensor: a pointer and a struct of some 120 bytes).
const messageElementBytes = 128

// count adds b, a message of md, and the messages in it to z; it fails
// when the elements pass maxMessageElements. What does not parse is left
// to proto.Unmarshal to refuse.
func (z *messageSize) count(b []byte, md protoreflect.MessageDescriptor, depth int) error {
	if depth > 32 {
		return nil
	}
	contents := md.FullName() == "inference.InferTensorContents"
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil
		}
		field := b
		b = b[l:]
		var v []byte
		if typ == protowire.BytesType {
			v, l = protowire.ConsumeBytes(b)
		} else {
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return nil
		}
		b = b[l:]
		field = field[:len(field)-len(b)]
		fd := md.Fields().ByNumber(num)
		if fd == nil {
			continue // unknown: kept as its bytes
		}
		if contents {
			z.contents(fd, typ, v, int64(len(field)))
			continue
		}
		if fd.IsList() || fd.IsMap() {
			if fd.Kind() == protoreflect.MessageKind || fd.IsMap() {
				z.extra += messageElementBytes
			}
			z.elements += listElements(fd, typ, v)
			if z.elements > maxMessageElements {
				return fmt.Errorf("%w: the message has more than %d elements in its repeated and map fields besides tensor data (inputs, outputs, dimensions, parameters): no request needs so many",
					ErrBadRequest, maxMessageElements)
			}
		}
		if typ == protowire.BytesType && fd.Kind() == protoreflect.MessageKind {
			if err := z.count(v, fd.Message(), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// contents adds one field of tensor contents, of wire bytes on the wire,
// to what they take decoded: each element's Go size (a BYTES element's
// slice header and its bytes).
func (z *messageSize) contents(fd protoreflect.FieldDescriptor, typ protowire.Type, v []byte, wire int64) {
	var d int64
	switch fd.Kind() {
	case protoreflect.BytesKind, protoreflect.StringKind:
		d = 24 + int64(len(v))
	case protoreflect.BoolKind:
		d = int64(listElements(fd, typ, v))
	case protoreflect.Int32Kind, protoreflect.Uint32Kind, protoreflect.Sint32Kind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		d = 4 * int64(listElements(fd, typ, v))
	default:
		d = 8 * int64(listElements(fd, typ, v))
	}
	z.extra += max(d-wire, 0)
}

// listElements is the elements one field of a repeated field holds on
// the wire: one, or those of a packed run.
func listElements(fd protoreflect.FieldDescriptor, typ protowire.Type, v []byte) int {
	switch {
	case typ != protowire.BytesType || fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind || fd.Kind() == protoreflect.MessageKind:
		return 1
	case fd.Kind() == protoreflect.Fixed32Kind || fd.Kind() == protoreflect.Sfixed32Kind || fd.Kind() == protoreflect.FloatKind:
		return len(v) / 4
	case fd.Kind() == protoreflect.Fixed64Kind || fd.Kind() == protoreflect.Sfixed64Kind || fd.Kind() == protoreflect.DoubleKind:
		return len(v) / 8
	}
	n := 0 // packed varints: one ends at each byte under 0x80
	for _, c := range v {
		if c < 0x80 {
			n++
		}
	}
	return n
}

// retryLater is err as an UNAVAILABLE status that tells the client when
// to try again (errdetails.RetryInfo, one second).
func retryLater(err error) error {
	st := status.New(codes.Unavailable, errorText(err))
	if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)}); derr == nil {
		st = d
	}
	return st.Err()
}
