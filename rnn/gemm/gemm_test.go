package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

func randSlice(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// TestMulT compares MulT with a float64 reference over shapes that cover
// every kernel and tail (k % 8, n % 3 and % 4, m % 4), strided operands,
// alpha and beta, and checks that guard bands around C are untouched.
func TestMulT(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, m := range []int{1, 2, 3, 4, 5, 9} {
		for _, n := range []int{1, 2, 3, 4, 5, 7, 13} {
			for _, k := range []int{1, 3, 7, 8, 9, 16, 17, 33} {
				lda, ldw, ldc := k+r.IntN(3), k+r.IntN(3), n+r.IntN(3)
				a, w := randSlice(r, (m-1)*lda+k), randSlice(r, (n-1)*ldw+k)
				const guard = 5
				c := randSlice(r, (m-1)*ldc+n+2*guard)
				c0 := append([]float32(nil), c...)
				alpha, beta := float32(1), float32(0)
				if k%2 == 1 {
					alpha, beta = 0.5, -1.5
				}
				MulT(m, n, k, alpha, a, lda, w, ldw, beta, c[guard:], ldc)
				for i := range c {
					inside := i >= guard && i < len(c)-guard && (i-guard)%ldc < n
					if !inside && c[i] != c0[i] {
						t.Fatalf("m=%d n=%d k=%d: wrote outside C at %d", m, n, k, i)
					}
				}
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						var d float64
						for q := 0; q < k; q++ {
							d += float64(a[i*lda+q]) * float64(w[j*ldw+q])
						}
						want := float64(alpha)*d + float64(beta)*float64(c0[guard+i*ldc+j])
						got := float64(c[guard+i*ldc+j])
						if math.Abs(got-want) > 1e-5*(1+math.Abs(want))*float64(k) {
							t.Fatalf("m=%d n=%d k=%d: C[%d][%d] = %v, want %v", m, n, k, i, j, got, want)
						}
					}
				}
			}
		}
	}
}

// TestRowsIndependent checks the property the tree executors rely on: a
// row of C has the same bits whether it is computed alone or among others,
// at any position.
func TestRowsIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, k := range []int{5, 8, 150, 301} {
		m, n := 11, 29
		a, w := randSlice(r, m*k), randSlice(r, n*k)
		all := make([]float32, m*n)
		MulT(m, n, k, 1, a, k, w, k, 0, all, n)
		for i := 0; i < m; i++ {
			one := make([]float32, n)
			MulT(1, n, k, 1, a[i*k:], k, w, k, 0, one, n)
			for j := range one {
				if one[j] != all[i*n+j] {
					t.Fatalf("k=%d: row %d col %d: %v alone, %v in the batch", k, i, j, one[j], all[i*n+j])
				}
				// And through the BLAS interface, as Sgemv.
			}
			gv := make([]float32, n)
			Implementation{}.Sgemv(blas.NoTrans, n, k, 1, w, k, a[i*k:(i+1)*k], 1, 0, gv, 1)
			for j := range gv {
				if gv[j] != one[j] {
					t.Fatalf("k=%d: Sgemv differs from MulT at row %d col %d", k, i, j)
				}
			}
		}
	}
}

// TestGenericAgrees checks the assembly against dotGeneric's arithmetic
// (equal up to the rounding of the fused multiply-add).
func TestGenericAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	m, n, k := 6, 10, 77
	a, w := randSlice(r, m*k), randSlice(r, n*k)
	got, want := make([]float32, m*n), make([]float32, m*n)
	MulT(m, n, k, 1, a, k, w, k, 0, got, n)
	mulTGeneric(m, n, k, 1, a, k, w, k, 0, want, n)
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 1e-4 {
			t.Fatalf("element %d: %v, generic %v", i, got[i], want[i])
		}
	}
}

// TestOtherLayoutsDelegate checks that layouts the kernel does not cover
// still compute (through gonum).
func TestOtherLayoutsDelegate(t *testing.T) {
	a := []float32{1, 2, 3, 4}
	b := []float32{5, 6, 7, 8}
	c := make([]float32, 4)
	Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2)
	want := make([]float32, 4)
	gonum.Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, 2, 2, 2, 1, a, 2, b, 2, 0, want, 2)
	for i := range c {
		if c[i] != want[i] {
			t.Fatalf("NoTrans/NoTrans: %v, gonum %v", c, want)
		}
	}
}

// BenchmarkMulT measures the kernel at the tree benchmark's shapes: the
// Binary TreeLSTM's inner product (5H × 2H, H = 150) for 1 and 32 rows.
//
//	go test ./rnn/gemm -run '^$' -bench MulT -benchtime 200ms
func BenchmarkMulT(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	n, k := 750, 300
	w := randSlice(r, n*k)
	for _, m := range []int{1, 32} {
		a := randSlice(r, m*k)
		c := make([]float32, m*n)
		for _, impl := range []struct {
			name string
			f    blas.Float32
		}{{"gemm", Implementation{}}, {"gonum", gonum.Implementation{}}} {
			b.Run(impl.name+"/rows="+itoa(m), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					impl.f.Sgemm(blas.NoTrans, blas.Trans, m, n, k, 1, a, k, w, k, 0, c, n)
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
