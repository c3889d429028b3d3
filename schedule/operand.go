package schedule

// Mat is a typed operand: a Rows×Cols block of Buf's elements, the first
// at element Off, each next row LD elements further (LD >= Cols). A vector
// is a Mat of one row. Steps are built from Mats: the kernel receives the
// slices Mat gives, and the step's regions are the Mats' regions, so what
// a step declares and what it touches cannot be written apart.
type Mat struct {
	Buf            *Buffer
	Off            int
	Rows, Cols, LD int
}

// M is the Mat of rows×cols elements of buf from element off, rows ld apart.
func M(buf *Buffer, off, rows, cols, ld int) Mat {
	return Mat{Buf: buf, Off: off, Rows: rows, Cols: cols, LD: ld}
}

// Dense is the Mat of rows×cols contiguous elements of buf from element off.
func Dense(buf *Buffer, off, rows, cols int) Mat { return M(buf, off, rows, cols, cols) }

// Whole is all of buf as one row.
func Whole(buf *Buffer) Mat { return M(buf, 0, 1, buf.Elems, buf.Elems) }

// Row is row r of m, as a one-row Mat.
func (m Mat) Row(r int) Mat { return M(m.Buf, m.Off+r*m.LD, 1, m.Cols, m.Cols) }

// Rows is rows [r0, r1) of m.
func (m Mat) RowRange(r0, r1 int) Mat { return M(m.Buf, m.Off+r0*m.LD, r1-r0, m.Cols, m.LD) }

// ColRange is columns [c0, c1) of every row of m.
func (m Mat) ColRange(c0, c1 int) Mat { return M(m.Buf, m.Off+c0, m.Rows, c1-c0, m.LD) }

// Empty reports whether m has no elements.
func (m Mat) Empty() bool { return m.Rows == 0 || m.Cols == 0 }

// F32 is the float32 slice the kernel gets: from the first element to one
// past the last, rows LD apart. Empty for an empty Mat or a dry buffer.
// F32, U16 and I64 take a pointer: they run on every kernel call, and a
// Mat copied by value through the stack stalls on store forwarding.
func (m *Mat) F32() []float32 { return window(m.Buf.F32, m) }

// U16 is F32 for a buffer of bf16 weights.
func (m *Mat) U16() []uint16 { return window(m.Buf.U16, m) }

// U8 is F32 for a buffer of bytes (int8 weights or quantized rows).
func (m *Mat) U8() []uint8 { return window(m.Buf.U8, m) }

// I64 is F32 for a buffer of int64 ids.
func (m *Mat) I64() []int64 { return window(m.Buf.I64, m) }

// window is m's elements of b, its buffer's storage (see F32).
func window[T any](b []T, m *Mat) []T {
	if b == nil || m.Rows == 0 || m.Cols == 0 {
		return nil
	}
	end := m.Off + (m.Rows-1)*m.LD + m.Cols
	return b[m.Off:end:end]
}

// Region is the byte region m covers.
func (m Mat) Region() Region {
	es := int64(m.Buf.ElemSize)
	if m.Rows == 1 || m.Cols == m.LD {
		return Region{Buf: m.Buf, Off: es * int64(m.Off), Len: es * int64(m.Rows*m.Cols), Count: 1}
	}
	return Region{Buf: m.Buf, Off: es * int64(m.Off), Len: es * int64(m.Cols), Count: m.Rows, Stride: es * int64(m.LD)}
}

// Rows32 is a list of rows of one buffer, each Width elements (a row index
// list as the tree executors and cellular batching gather them); a
// negative index stands for a row of zeros and is not read.
type Rows32 struct {
	Buf   *Buffer
	Width int
	Idx   []int32
}

func (r Rows32) regions(fn func(Region, bool), write bool) {
	for _, k := range r.Idx {
		if k >= 0 {
			fn(Dense(r.Buf, int(k)*r.Width, 1, r.Width).Region(), write)
		}
	}
}

// emit sends m's region to fn unless m is empty.
func emit(fn func(Region, bool), m Mat, write bool) {
	if !m.Empty() {
		fn(m.Region(), write)
	}
}
