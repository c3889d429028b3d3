package onnx

import (
	"bytes"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"rnnserve/models/safetensors"
)

// TestTransposedReads reads a stored matrix transposed, whole and in
// every piece Float32sInto's chunks or a caller could ask for, against
// the transpose done element by element; and through F16 (2-byte
// elements, read in chunks).
func TestTransposedReads(t *testing.T) {
	for _, c := range []struct{ rows, cols int }{{1, 1}, {3, 5}, {7, 1}, {1, 9}, {37, 4099}, {300, 17}} {
		for _, es := range []int64{2, 4} {
			stored := make([]byte, int64(c.rows*c.cols)*es)
			for i := range stored {
				stored[i] = byte(i*7 + i/251)
			}
			want := make([]byte, len(stored))
			for i := range c.rows {
				for j := range c.cols {
					copy(want[(int64(j*c.rows+i))*es:], stored[int64(i*c.cols+j)*es:int64(i*c.cols+j+1)*es])
				}
			}
			const off = 3 // the matrix starts 3 bytes into the file
			v := &transposed{r: bytes.NewReader(append(make([]byte, off), stored...)), off: off, rows: int64(c.rows), cols: int64(c.cols), es: es}
			got := make([]byte, len(want))
			if n, err := v.ReadAt(got, 0); n != len(got) || err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%dx%d of %d bytes: whole read %d, %v, equal %v", c.rows, c.cols, es, n, err, bytes.Equal(got, want))
			}
			r := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.cols)))
			for range 20 {
				e0 := r.Int64N(int64(c.rows * c.cols))
				e1 := e0 + 1 + r.Int64N(int64(c.rows*c.cols)-e0)
				part := make([]byte, (e1-e0)*es)
				if n, err := v.ReadAt(part, e0*es); n != len(part) || err != nil || !bytes.Equal(part, want[e0*es:e1*es]) {
					t.Fatalf("%dx%d of %d bytes: elements %d..%d: %d, %v", c.rows, c.cols, es, e0, e1, n, err)
				}
			}
			if n, err := v.ReadAt(make([]byte, es), int64(len(want))); n != 0 || err != io.EOF {
				t.Errorf("read past the end: %d, %v", n, err)
			}
			if _, err := v.ReadAt(make([]byte, es), 1); err == nil {
				t.Error("a read of part of an element")
			}
		}
	}
}

// TestPieces reads gate blocks reordered, in every range.
func TestPieces(t *testing.T) {
	file := make([]byte, 64)
	for i := range file {
		file[i] = byte(i)
	}
	p := &pieces{r: bytes.NewReader(file), at: []piece{{40, 8}, {0, 8}, {16, 4}, {60, 4}}}
	want := slices.Concat(file[40:48], file[0:8], file[16:20], file[60:64])
	for lo := range len(want) {
		for hi := lo; hi <= len(want)+2; hi++ {
			got := make([]byte, hi-lo)
			n, err := p.ReadAt(got, int64(lo))
			end := min(hi, len(want))
			if n != end-lo || !bytes.Equal(got[:n], want[lo:end]) || (hi > len(want)) != (err == io.EOF) || err != nil && err != io.EOF {
				t.Fatalf("bytes %d..%d: %d %v, %v; want %v", lo, hi, n, err, got[:n], want[lo:end])
			}
		}
	}
	// A file shorter than the pieces say ends the read with an error.
	short := &pieces{r: bytes.NewReader(file[:10]), at: []piece{{0, 8}, {8, 8}}}
	if n, err := short.ReadAt(make([]byte, 16), 0); n != 10 || err != io.ErrUnexpectedEOF {
		t.Errorf("short file: %d, %v", n, err)
	}
}

// TestLeftInFile: every golden export read with its tensor data of more
// than elideMin bytes left in the file and with all of it decoded gives
// the same weights.
func TestLeftInFile(t *testing.T) {
	goldens, _ := filepath.Glob("../testdata/golden/onnx_*")
	if len(goldens) == 0 {
		t.Fatal("no goldens")
	}
	for _, g := range goldens {
		data := golden(t, filepath.Base(g))
		if _, payloads, _, err := walk(bytes.NewReader(data), int64(len(data)), elideMin); err != nil || len(payloads) == 0 {
			t.Fatalf("%s: no tensor data left in the file (%v)", filepath.Base(g), err)
		}
		left, err := readAt(bytes.NewReader(data), int64(len(data)), nil, elideMin)
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := readAt(bytes.NewReader(data), int64(len(data)), nil, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		a, b := weights(left), weights(decoded)
		if len(a) != len(b) || len(a) < 4 {
			t.Fatalf("%s: %d and %d weights", g, len(a), len(b))
		}
		for i := range a {
			if !slices.Equal(a[i].Shape, b[i].Shape) || !slices.Equal(values(t, a[i]), values(t, b[i])) {
				t.Errorf("%s: weight %d (%s) differs", filepath.Base(g), i, a[i].Name)
			}
		}
	}
}

// weights lists a model's weights.
func weights(m *Model) []*safetensors.Tensor {
	var ws []*safetensors.Tensor
	if m.Embedding != nil {
		ws = append(ws, m.Embedding)
	}
	for _, l := range m.Layers {
		for _, d := range l.Dirs {
			ws = append(ws, d.Wih, d.Whh, d.Bih, d.Bhh)
		}
	}
	if m.HeadW != nil {
		ws = append(ws, m.HeadW)
	}
	if m.HeadB != nil {
		ws = append(ws, m.HeadB)
	}
	return ws
}
