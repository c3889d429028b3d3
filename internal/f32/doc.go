// Package f32 holds rnnserve's float32 kernels: the matrix products the
// recurrent layers stream their weights through, the fused LSTM and GRU
// gate nonlinearities, bf16 weight storage, and a read-bandwidth probe.
//
// # Layers
//
// Every kernel has a pure-Go implementation that documents it by its loop
// (generic.go, approx.go) and, on amd64 with AVX2 and FMA, an assembly one
// (*_amd64.s) chosen at run time from the CPU's feature flags
// (golang.org/x/sys/cpu). Building with -tags purego leaves the assembly
// out, so the pure-Go path can be tested and benchmarked on its own; the
// tests also run both paths in one binary and compare them. Impl names
// the path in use.
//
// # Layout
//
// Matrices are row-major float32 with a leading dimension (elements
// between the starts of consecutive rows), as in BLAS and gonum. The
// products the recurrent layers need are
//
//	GemmNT  C = A·Wᵀ + beta·C   W [n][k] as PyTorch stores weight_ih/weight_hh
//	GemvN   y = W·x + beta·y    GemmNT with one row
//	GemmNN  C = A·W + beta·C    W [k][n], input-major (Schedule A's G)
//	GemvT   y = xᵀ·W + beta·y   GemmNN with one row
//
// beta == 0 means C (or y) is not read, so it may hold anything.
//
// At batch 1 a recurrent step is one GemvN over W_hh, and its speed is the
// speed W_hh streams from wherever it lives; the assembly keeps four
// independent row streams and two column chunks in flight so the loads,
// not the arithmetic, set the pace. With more rows (a batch, or the input
// projections of every time step at once) GemmNT goes through a 2×4
// register tile and blocks k and m so a block of W stays in L1 while the
// A rows stream from L2.
//
// # Gate nonlinearities
//
// Sigmoid and tanh are float32 approximations (approx.go): exp by range
// reduction and a degree-7 polynomial, sigmoid as 1/(1+exp(-x)) with a true
// division, tanh as 1-2/(exp(2|x|)+1) above 0.625 and an odd polynomial
// below. Their error against float64 is a few float32 ulps (the tests bound
// it at 3e-7 absolute), far inside the 1e-5 the golden tests allow.
//
// # bf16
//
// A bf16 value is the high 16 bits of a float32 (8 exponent bits, 7
// mantissa bits), so it widens to float32 exactly by a shift. ToBF16
// rounds to nearest even. GemmNTBF16 reads bf16 weights and computes in
// float32: half the bytes streamed for a relative weight error of at most
// 2^-9.
package f32
