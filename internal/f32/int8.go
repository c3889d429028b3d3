package f32

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// int8 weights: products whose W is quantized to int8 once, per output
// row, and whose A is quantized to seven bits per row as the product runs
// (dynamic quantization), multiplied and summed exactly in int32 and
// scaled back to float32. A quarter of float32's bytes to stream.
//
// # Quantization
//
// Both sides are symmetric, with a float32 scale per row:
//
//	W row j:  sw[j] = max_k |W[j][k]| / 127,  W8[j][k] = round(W[j][k] / sw[j])
//	A row i:  s[i]  = max_k |A[i][k]| / 63,   A7[i][k] = round(A[i][k] · (63 / max_k |A[i][k]|))
//
// rounding to nearest even, W8 in [-127, 127] and A7 in [-63, 63], a row
// of zeros has scale 0. A row's scale is its own, so a row of C is the
// same alone or in a batch, as GemmNT's is. The product is
//
//	acc = Σ_k A7[i][k]·W8[j][k]                        (exact, int32)
//	C[i][j] = float32(acc)·float32(s[i]·sw[j]) + float32(beta·C[i][j])
//
// each operation rounded to float32 in that order (beta·C is +0 when beta
// == 0, and C is not read), on every path, so the AVX-512 VNNI, AVX2 and
// pure-Go kernels give the same bits on every CPU (the tests compare them
// bit for bit).
//
// Why seven bits for A: the products take A7 + 64, in [1, 127], as their
// unsigned bytes and subtract 64·Σ_k W8[j][k], stored with the panel.
// VNNI's VPDPBUSD adds four products into int32 and would take eight bits;
// AVX2's VPMADDUBSW adds pairs into int16 with saturation, and a pair of
// 127·127 is 32258, under 32767: exact, with no instruction to move a sign
// (eight-bit A on AVX2 needs a VPSIGNB for every multiply: the one-row
// product ran 1.27-1.47x faster without it on a Zen 3 core, as
// docs/precision.md says). One quantization on every CPU
// keeps a model's int8 results the same on hosts with and without VNNI.
// ONNX Runtime, for the same saturation, gives its weights seven bits on
// CPUs without VNNI; PyTorch's fbgemm, as here, its activations.
//
// The accumulator is exact while 127·127·k < 2^31: k up to MaxI8K.
//
// # Layout
//
// A quantized A row (QuantizeI8) is I8Stride(k) bytes, A7 + 64 as
// unsigned bytes (64 is zero), its last I8Stride(k)-k bytes 64. A packed
// W (PackI8) is a sequence of panels of I8Panel rows (the last padded with
// rows of zeros), each I8PanelBytes(k) bytes:
//
//	for each quad c < I8Stride(k)/4: 64 bytes, row r's W8[16p+r][4c..4c+3] at 4r
//	then 16 int32 (little-endian): 64·Σ_k W8[16p+r][k], row r at 4r
//	then 16 float32 (little-endian): sw[16p+r]
//
// so a VPDPBUSD over one zmm register takes a quad of A broadcast to
// every lane and adds it times sixteen rows' quads, one per lane (AVX2:
// each half of eight rows in a ymm register, VPMADDUBSW then VPMADDWD by
// ones): the rows' sums build up in lanes with no horizontal sums, and W
// streams as one sequence of whole cache lines.

// I8Panel is the rows of a panel of a packed int8 W.
const I8Panel = 16

// MaxI8K is the longest row the int8 products take: the int32 sums stay
// exact up to it.
const MaxI8K = 1 << 16

const (
	errI8K     = "f32: int8 row longer than MaxI8K"
	errShortQ  = "f32: quantized A too short"
	errShortS  = "f32: scales too short"
	errShortP  = "f32: packed int8 W too short"
	errLdq     = "f32: quantized row stride smaller than I8Stride(k)"
	errI8Meta  = "f32: int8 panel metadata"
	i8MetaSize = 2 * 4 * I8Panel // sums and scales after a panel's weights
	i8AMax     = 63              // the largest |A7|
	i8Zero     = 64              // the stored byte of A7 = 0
)

// I8Stride is the bytes of one quantized row of k values: k rounded up to
// a multiple of four.
func I8Stride(k int) int { return (k + 3) &^ 3 }

// I8PanelBytes is the bytes of one panel of a packed int8 W of rows k
// values long.
func I8PanelBytes(k int) int { return I8Panel*I8Stride(k) + i8MetaSize }

// PackedI8Bytes is the bytes PackI8 writes for W [n][k].
func PackedI8Bytes(n, k int) int { return (n + I8Panel - 1) / I8Panel * I8PanelBytes(k) }

// NewPackedI8 allocates room for W [n][k] packed, its first byte on a
// 64-byte boundary so that every quad of a panel is one cache line.
func NewPackedI8(n, k int) []uint8 {
	size := PackedI8Bytes(n, k)
	raw := make([]uint8, size+63)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(raw))) & 63)
	return raw[off : off+size : off+size]
}

// PackI8 quantizes W [n][k] (leading dimension ldw) row by row and writes
// it into dst (PackedI8Bytes(n, k) bytes) in the layout above. W must be
// finite.
func PackI8(dst []uint8, n, k int, w []float32, ldw int) {
	if n < 0 || k < 0 {
		panic(errNegative)
	}
	if k > MaxI8K {
		panic(errI8K)
	}
	checkMat(w, n, k, ldw, errShortW)
	if len(dst) < PackedI8Bytes(n, k) {
		panic(errShortDst)
	}
	kq, pb := I8Stride(k), I8PanelBytes(k)
	clear(dst[:PackedI8Bytes(n, k)])
	for j := 0; j < n; j++ {
		p, r := dst[j/I8Panel*pb:], j%I8Panel
		row := w[j*ldw : j*ldw+k]
		var amax float64
		for _, v := range row {
			amax = max(amax, math.Abs(float64(v)))
		}
		var sum int32
		if amax > 0 {
			for c, v := range row {
				q := int8(max(-127, min(127, math.RoundToEven(float64(v)*127/amax))))
				p[c/4*64+4*r+c%4] = uint8(q)
				sum += int32(q)
			}
		}
		binary.LittleEndian.PutUint32(p[16*kq+4*r:], uint32(i8Zero*sum))
		binary.LittleEndian.PutUint32(p[16*kq+64+4*r:], math.Float32bits(float32(amax/127)))
	}
}

// UnpackI8Row writes row j of a packed W [n][k] into q (k values) and
// returns its scale: W[j][c] ≈ q[c]·scale.
func UnpackI8Row(q []int8, n, k int, p []uint8, j int) float32 {
	if j < 0 || j >= n || len(q) < k || len(p) < PackedI8Bytes(n, k) {
		panic(errShortDst)
	}
	kq := I8Stride(k)
	panel, r := p[j/I8Panel*I8PanelBytes(k):], j%I8Panel
	for c := range q[:k] {
		q[c] = int8(panel[c/4*64+4*r+c%4])
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(panel[16*kq+64+4*r:]))
}

// QuantizeI8 quantizes the m rows of A [m][k] (leading dimension lda) into
// q (rows ldq >= I8Stride(k) bytes apart, as described above) and their
// scales into s [m]. A must be finite: the bytes of a row holding NaN or
// ±Inf are unspecified.
func QuantizeI8(m, k int, a []float32, lda int, q []uint8, ldq int, s []float32) {
	if m < 0 || k < 0 {
		panic(errNegative)
	}
	if k > MaxI8K {
		panic(errI8K)
	}
	kq := I8Stride(k)
	if ldq < kq {
		panic(errLdq)
	}
	checkMat(a, m, k, lda, errShortA)
	if m > 0 && len(q) < (m-1)*ldq+kq {
		panic(errShortQ)
	}
	if len(s) < m {
		panic(errShortS)
	}
	for i := 0; i < m; i++ {
		row, qr := a[i*lda:i*lda+k], q[i*ldq:i*ldq+kq]
		amax := absMaxKernel(row)
		if amax == 0 {
			s[i] = 0
			for c := range qr {
				qr[c] = i8Zero
			}
			continue
		}
		s[i] = amax / i8AMax
		quantizeKernel(qr[:k], row, i8AMax/amax)
		for c := k; c < kq; c++ {
			qr[c] = i8Zero
		}
	}
}

// GemmNTI8 computes C = A·Wᵀ + beta·C as described above for A [m][k]
// quantized by QuantizeI8 (q, rows ldq bytes apart, scales s [m]), W
// [n][k] packed by PackI8 (p) and C [m][n] (ldc). With beta == 0, C is
// only written.
func GemmNTI8(m, n, k int, q []uint8, ldq int, s []float32, p []uint8, beta float32, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(errNegative)
	}
	if k > MaxI8K {
		panic(errI8K)
	}
	kq := I8Stride(k)
	if ldq < kq {
		panic(errLdq)
	}
	if m > 0 && len(q) < (m-1)*ldq+kq {
		panic(errShortQ)
	}
	if len(s) < m {
		panic(errShortS)
	}
	if len(p) < PackedI8Bytes(n, k) {
		panic(errShortP)
	}
	checkMat(c, m, n, ldc, errShortC)
	if m == 0 || n == 0 {
		return
	}
	gemmI8Kernel(m, n, kq, q, ldq, s, p, plusZero(beta), c, ldc)
}

// gemmI8Go is
//
//	for i < m, j < n:
//	    acc := Σ_{c < kq} (int32(q[i*ldq+c]) - 64) · W8[j][c]
//	    c[i*ldc+j] = float32(acc)·float32(s[i]·sw[j]) + float32(beta·c[i*ldc+j])
//
// with beta·c taken as +0 (c not read) when beta == 0, over a packed W
// of rows kq (a multiple of 4) bytes long.
func gemmI8Go(m, n, kq int, q []uint8, ldq int, s []float32, p []uint8, beta float32, c []float32, ldc int) {
	pb := I8Panel*kq + i8MetaSize
	for j := 0; j < n; j++ {
		panel, r := p[j/I8Panel*pb:], j%I8Panel
		sw := math.Float32frombits(binary.LittleEndian.Uint32(panel[16*kq+64+4*r:]))
		for i := 0; i < m; i++ {
			qr := q[i*ldq : i*ldq+kq]
			var acc int32
			for x, v := range qr {
				acc += (int32(v) - i8Zero) * int32(int8(panel[x/4*64+4*r+x%4]))
			}
			var bc float32 // +0 when beta == 0: C is not read
			if beta != 0 {
				bc = float32(beta * c[i*ldc+j])
			}
			c[i*ldc+j] = float32(float32(acc)*float32(s[i]*sw)) + bc
		}
	}
}

// absMaxGo is max_i |x[i]| (0 for none).
func absMaxGo(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return m
}

// quantizeGo is
//
//	for i, v := range x { q[i] = 64 + clamp(roundEven(v·inv), -63, 63) }
func quantizeGo(q []uint8, x []float32, inv float32) {
	q = q[:len(x)]
	for i, v := range x {
		t := math.RoundToEven(float64(v * inv))
		q[i] = uint8(i8Zero + int(max(-i8AMax, min(i8AMax, t))))
	}
}

// i8Kernel names a path of the int8 products, best first.
type i8Kernel uint8

const (
	i8VNNI i8Kernel = iota // AVX-512 VNNI (VPDPBUSD on zmm)
	i8AVX2                 // AVX2 (VPMADDUBSW, VPMADDWD)
	i8Go                   // pure Go
)

func (k i8Kernel) String() string {
	switch k {
	case i8VNNI:
		return "avx512vnni"
	case i8AVX2:
		return "avx2"
	}
	return "go"
}

// I8Impl names the int8 kernels in use: "avx512vnni", "avx2" or "go",
// picked from the CPU's features (or "go" with -tags purego).
func I8Impl() string { return i8Path.String() }

// I8ReadsSums reports whether the int8 products in use read the sums a
// packed W keeps after each panel's weights (64·Σ_k W8, the correction
// for their unsigned A): the AVX-512 VNNI and AVX2 products do; the pure-Go
// one subtracts 64 from A and reads only the weights and the scales.
func I8ReadsSums() bool { return i8Path != i8Go }
