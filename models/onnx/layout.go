package onnx

import (
	"errors"
	"io"
	"unsafe"

	"rnnserve/models/safetensors"
)

// A weight reaches the network in PyTorch's layout without being held in
// ONNX's first: each tensor of a Model is a view of the stored bytes (an
// io.ReaderAt) that reads them in PyTorch's order, so the caller reads it
// once, from the file straight into the network's buffer
// (safetensors.Tensor.Float32sInto). A view is pieces of the stored bytes
// in another order (one direction of W, R or B; gate blocks reordered;
// B split into bias_ih and bias_hh), or a matrix transposed through a
// buffer of at most tileBytes.

// whole is the stored tensor as it is, under shape.
func (s *stored) whole(shape []int) *safetensors.Tensor {
	return view(s, shape, &pieces{r: s.r, at: []piece{{s.off, s.size()}}})
}

func (s *stored) size() int64 {
	n := s.es()
	for _, d := range s.shape {
		n *= int64(d)
	}
	return n
}

// gates is a [len(src)*H][cols] slice of the stored tensor (cols 1: a
// vector) whose block b of H rows is the block src[b] of the H-row blocks
// that start at element first.
func (s *stored) gates(first int64, src []int, H, cols int) *safetensors.Tensor {
	block := int64(H*cols) * s.es()
	p := &pieces{r: s.r}
	for _, k := range src {
		p.at = append(p.at, piece{s.off + first*s.es() + int64(k)*block, block})
	}
	shape := []int{len(src) * H, cols}
	if cols == 1 {
		shape = shape[:1]
	}
	return view(s, shape, p)
}

// transposed is the stored [rows][cols] matrix as [cols][rows].
func (s *stored) transposed() *safetensors.Tensor {
	rows, cols := s.shape[0], s.shape[1]
	return view(s, []int{cols, rows}, &transposed{r: s.r, off: s.off, rows: int64(rows), cols: int64(cols), es: s.es()})
}

func view(s *stored, shape []int, r io.ReaderAt) *safetensors.Tensor {
	n := s.es()
	for _, d := range shape {
		n *= int64(d)
	}
	return &safetensors.Tensor{Name: s.name, DType: s.dt, Shape: shape, Section: io.NewSectionReader(r, 0, n)}
}

// zeros is a float32 vector of n zeros.
func zeros(name string, n int) *safetensors.Tensor {
	return &safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: []int{n}, Data: make([]byte, 4*n)}
}

// piece is n bytes at off.
type piece struct{ off, n int64 }

// pieces reads the concatenation of pieces of r.
type pieces struct {
	r  io.ReaderAt
	at []piece
}

func (p *pieces) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("onnx: negative offset")
	}
	n := 0
	var pos int64 // where the piece starts in the view
	for _, q := range p.at {
		if n == len(b) {
			return n, nil
		}
		cur := off + int64(n)
		if cur >= pos+q.n {
			pos += q.n
			continue
		}
		in := cur - pos
		k := int(min(int64(len(b)-n), q.n-in))
		m, err := p.r.ReadAt(b[n:n+k], q.off+in)
		n += m
		if m < k {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
		pos += q.n
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// column copies the elements of a column of a tile, row bytes apart in
// src, to consecutive elements of dst.
func column(dst, src []byte, row, es int64) {
	n := int64(len(dst)) / es
	if es == 4 && aligned(dst, 4) && aligned(src, 4) {
		d := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(dst))), n)
		s := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(src))), (int64(len(src))+3)/4)
		stride := row / 4
		for i := range d {
			d[i] = s[int64(i)*stride]
		}
		return
	}
	for i := range n {
		copy(dst[i*es:(i+1)*es], src[i*row:i*row+es])
	}
}

func aligned(b []byte, n uintptr) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%n == 0
}

// tileBytes bounds the buffer a transposed read goes through.
const tileBytes = 256 << 10

// transposed reads a stored [rows][cols] matrix of es-byte elements as
// [cols][rows].
type transposed struct {
	r              io.ReaderAt
	off            int64
	rows, cols, es int64
}

// ReadAt reads whole elements: off and len(b) are multiples of es. It
// reads the stored matrix in tiles of a few rows and up to a few thousand
// columns, each row's part of a tile in one read, and scatters each tile's
// columns into the rows of b they become.
func (t *transposed) ReadAt(b []byte, off int64) (int, error) {
	es, total := t.es, t.rows*t.cols*t.es
	if off < 0 || off%es != 0 || int64(len(b))%es != 0 {
		return 0, errors.New("onnx: a transposed read of part of an element")
	}
	if off >= total {
		return 0, io.EOF
	}
	end := min(off+int64(len(b)), total)
	e0, e1 := off/es, end/es // the elements of b: element j*rows + i is stored (i, j)
	j0, j1 := e0/t.rows, (e1-1)/t.rows+1
	C := min(j1-j0, max(1, tileBytes/(16*es))) // stored columns per tile
	R := min(t.rows, max(1, tileBytes/(C*es))) // stored rows per tile
	buf := make([]byte, R*C*es)
	for i0 := int64(0); i0 < t.rows; i0 += R {
		ri := min(R, t.rows-i0)
		for jc := j0; jc < j1; jc += C {
			cj := min(C, j1-jc)
			row := cj * es
			for r := range ri {
				at := t.off + ((i0+r)*t.cols+jc)*es
				if m, err := t.r.ReadAt(buf[r*row:(r+1)*row], at); int64(m) < row {
					if err == nil || err == io.EOF {
						err = io.ErrUnexpectedEOF
					}
					return 0, err
				}
			}
			for j := range cj {
				e := (jc+j)*t.rows + i0 // the element of b that stored (i0, jc+j) becomes
				lo, hi := max(e, e0), min(e+ri, e1)
				if lo < hi {
					column(b[(lo-e0)*es:(hi-e0)*es], buf[(lo-e)*row+j*es:], row, es)
				}
			}
		}
	}
	n := int(end - off)
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}
