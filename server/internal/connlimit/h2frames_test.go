package connlimit

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"rnnserve/internal/fuzzbound"
)

// h2Wire is a client's side of a connection written with x/net/http2's
// framer: the preface, then frames.
type h2Wire struct {
	buf bytes.Buffer
	fr  *http2.Framer
}

func newH2Wire() *h2Wire {
	w := &h2Wire{}
	w.buf.WriteString(http2.ClientPreface)
	w.fr = http2.NewFramer(&w.buf, nil)
	w.fr.WriteSettings()
	return w
}

func (w *h2Wire) open(id uint32, end bool) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.WriteField(hpack.HeaderField{Name: ":path", Value: "/inference.GRPCInferenceService/ModelInfer"})
	w.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: end})
}

// msg is a gRPC message of size bytes (flag: compressed), its prefix and
// as much of it as part says.
func msg(size, part int, compressed bool) []byte {
	b := make([]byte, 5+part)
	if compressed {
		b[0] = 1
	}
	b[1], b[2], b[3], b[4] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	return b
}

// follow feeds wire to a new h2frames in random pieces (seeded), as
// reads from a connection come.
func follow(wire []byte, seed uint64) *h2frames {
	f := newH2Frames()
	rng := rand.New(rand.NewPCG(seed, 1))
	for len(wire) > 0 {
		n := min(len(wire), 1+rng.IntN(20))
		f.read(wire[:n])
		wire = wire[n:]
	}
	return f
}

// TestH2Frames: the announced sizes of gRPC messages are read from DATA
// frames however the bytes are split, padded frames included; a stream
// is pending until its message's prefix is whole and stops being when it
// ends; a compressed message counts as of unknown size; too many open
// streams stop the following.
func TestH2Frames(t *testing.T) {
	type want struct {
		announced int64
		pending   int32
		off       bool
	}
	cases := []struct {
		name  string
		write func(w *h2Wire)
		want  want
	}{
		{"preface only", func(w *h2Wire) {}, want{-1, 0, false}},
		{"a call without data", func(w *h2Wire) { w.open(1, false) }, want{-1, 1, false}},
		{"a small unary call", func(w *h2Wire) {
			w.open(1, false)
			w.fr.WriteData(1, true, msg(300, 300, false))
		}, want{300, 0, false}},
		{"a prefix split over two frames", func(w *h2Wire) {
			w.open(1, false)
			m := msg(70000, 10, false)
			w.fr.WriteData(1, false, m[:3])
			w.fr.WriteData(1, false, m[3:])
		}, want{70000, 0, false}},
		{"half a prefix", func(w *h2Wire) {
			w.open(1, false)
			w.fr.WriteData(1, false, msg(70000, 0, false)[:3])
		}, want{-1, 1, false}},
		{"padded frames, two messages", func(w *h2Wire) {
			w.open(3, false)
			b := append(msg(10, 10, false), msg(1<<20, 100, false)...)
			w.fr.WriteDataPadded(3, false, b[:12], make([]byte, 7))
			w.fr.WriteDataPadded(3, false, b[12:], make([]byte, 200))
		}, want{1 << 20, 0, false}},
		{"the second message begun", func(w *h2Wire) {
			w.open(1, false)
			b := append(msg(10, 10, false), 0, 0)
			w.fr.WriteData(1, false, b)
		}, want{10, 1, false}},
		{"compressed", func(w *h2Wire) {
			w.open(1, false)
			w.fr.WriteData(1, true, msg(20, 20, true))
		}, want{h2Unknown, 0, false}},
		{"ended by END_STREAM on HEADERS and by RST_STREAM", func(w *h2Wire) {
			w.open(1, true)
			w.open(3, false)
			w.fr.WriteRSTStream(3, http2.ErrCodeCancel)
			w.open(5, false)
			w.fr.WriteData(5, false, msg(64, 64, false))
		}, want{64, 0, false}},
		{"many small calls, one silent", func(w *h2Wire) {
			for i := range 50 {
				w.open(uint32(2*i+1), false)
				w.fr.WriteData(uint32(2*i+1), true, msg(i, i, false))
			}
			w.open(101, false)
			w.fr.WritePing(false, [8]byte{})
			w.fr.WriteWindowUpdate(0, 1000)
		}, want{49, 1, false}},
		{"too many streams", func(w *h2Wire) {
			for i := range h2MaxStreams + 1 {
				w.open(uint32(2*i+1), false)
			}
		}, want{-1, h2MaxStreams, true}},
	}
	for _, c := range cases {
		w := newH2Wire()
		c.write(w)
		for seed := range uint64(20) {
			f := follow(w.buf.Bytes(), seed)
			got := want{f.announced.Load(), f.pending.Load(), f.off.Load()}
			if got != c.want {
				t.Errorf("%s (pieces %d): announced %d, pending %d, off %v; want %+v", c.name, seed, got.announced, got.pending, got.off, c.want)
				break
			}
		}
	}
}

// FuzzH2Frames: whatever a connection sends, following it does not panic,
// reads the same in one piece as in any pieces, and never counts fewer
// than no pending streams or more than it follows.
func FuzzH2Frames(f *testing.F) {
	w := newH2Wire()
	w.open(1, false)
	w.fr.WriteDataPadded(1, false, msg(300, 20, false), make([]byte, 3))
	w.open(3, true)
	w.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	f.Add(w.buf.Bytes()[24:], uint64(1))
	f.Add([]byte{0, 0, 1, 0, 8, 0, 0, 0, 1, 5}, uint64(2))
	f.Fuzz(func(t *testing.T, frames []byte, seed uint64) {
		fuzzbound.Run(t, 0, func() {
			wire := append([]byte(http2.ClientPreface), frames...)
			whole := newH2Frames()
			whole.read(wire)
			pieces := follow(wire, seed)
			for _, g := range []*h2frames{whole, pieces} {
				if p := g.pending.Load(); p < 0 || !g.off.Load() && int(p) > len(g.streams) {
					t.Fatalf("pending %d with %d streams followed", p, len(g.streams))
				}
			}
			if whole.announced.Load() != pieces.announced.Load() || whole.pending.Load() != pieces.pending.Load() || whole.off.Load() != pieces.off.Load() {
				t.Fatalf("in one piece: %d %d %v; in pieces: %d %d %v", whole.announced.Load(), whole.pending.Load(), whole.off.Load(),
					pieces.announced.Load(), pieces.pending.Load(), pieces.off.Load())
			}
		})
	})
}
