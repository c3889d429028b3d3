// Package f32 holds rnnserve's float32 kernels: the matrix products the
// recurrent layers stream their weights through, the fused LSTM and GRU
// gate nonlinearities and the Elman (nn.RNN) one (elman.go), bf16 weight storage, and a read-bandwidth probe.
//
// # Layers
//
// Every kernel has a pure-Go implementation that documents it by its loop
// (generic.go, approx.go, bf16dp.go) and, on amd64 with AVX2 and FMA, an
// assembly one (*_amd64.s) chosen at run time from the CPU's feature
// flags (golang.org/x/sys/cpu). Where the CPU has AVX-512, the gates,
// the packed products and the row-major products of several rows
// (gemmNT6x8Z, two A rows to a register; gemm6z_amd64.s) have AVX-512
// forms with the AVX2 kernels' bits (avx512_amd64.go), the products used
// where 512-bit operations run at full width (not on AMD's Zen 4, which
// splits them; WidePacked); and with AVX512_BF16,
// GemmNTBF16 uses its bf16 dot products (bf16dp_amd64.s). Building with
// -tags purego leaves the assembly out, so the pure-Go path can be tested
// and benchmarked on its own; -tags noavx512 keeps to AVX2 and -tags
// avx512f32 uses the AVX-512 float32 kernels wherever the CPU has them,
// so that two builds of one commit can be timed against each other. The
// tests run every path the host has in one binary and compare them. Impl
// names the kernels in use.
//
// The sizes the products block by (a fraction of a core's L1d or L2, or
// of the last-level cache) come from the host's caches as internal/host
// reads them, once per process (blocking.go).
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
// GemmNT computes every element of C in one order whatever m, n and the
// element's place (gemmNTGo spells it out): eight lanes of fused
// multiply-adds over k, a fixed tree of horizontal sums, then beta·C. So a
// row of C has the same bits alone or in a batch, which the tree executors
// rely on; TestGemmNTOrder checks the assembly bit for bit against an
// exact emulation of that order.
//
// At batch 1 a recurrent step is one GemvN over W_hh, and its speed is the
// speed W_hh streams from wherever it lives: the 1×8 kernel keeps eight
// W rows (eight independent sums) in flight so the loads, not the
// arithmetic, set the pace. Two rows of A go through a 2×4 register tile,
// three or four through 4×3 (two rows at a time where rows are short);
// with more rows W goes in blocks that stay in cache while every group of
// A rows passes them.
//
// # Gate nonlinearities
//
// Sigmoid and tanh are float32 approximations (approx.go), the only ones
// in rnnserve: the sequence layers, attention and the tree cells all use
// them. exp by range reduction and a degree-7 polynomial, sigmoid as
// 1/(1+exp(-x)) with a true division, tanh as 1-2/(exp(2|x|)+1) above
// 0.625 and an odd polynomial below. Against float64 math over [-30, 30]
// (TestApproximations, a step of 7.3e-4 plus the edges) the largest
// errors are 8.8e-8 for sigmoid and 6.4e-8 for tanh (1.1e-7 relative);
// the tests bound them at 3e-7 absolute and 5e-7 relative, far inside the
// 1e-5 the PyTorch golden tests allow. The scalar forms and the vector
// forms (SigmoidTo, TanhTo, the fused gate kernels) compute the same
// formulas. The fused kernels are LSTMGates and GRUGates for the sequence
// layers and TreeLeafGates and TreeInnerGates for the Binary TreeLSTM;
// the tree kernels take a row's last n%8 units through the assembly too
// (in eight lanes padded with zeros), so every unit of a node is computed
// one way. On the project's machine a vector of eight costs about 3.5 ns
// for sigmoid and 5.8 ns for tanh, most of it the division and the
// polynomial's fused multiply-adds (BenchmarkTreeGates: 4.1 ns per unit of
// an inner node, five gates and tanh(c)).
//
// With AVX-512, LSTMGates and GRUGates take sixty-four units a pass, four
// groups of sixteen whose chains (exp's polynomial, the division, tanh's
// two branches) run interleaved instruction for instruction, in all 32
// registers, then thirty-two, then sixteen; the rest as the AVX2 path
// takes it, so the bits are the AVX2 kernels' at every n
// (TestGatesAVX512Bits). One chain alone leaves the core waiting on
// latencies: on the project's Zen 4 host, where a 512-bit operation runs
// as two 256-bit halves, sixteen units a pass ran 1.55x the AVX2 kernel
// and four groups 1.9-2.2x (LSTM 1.90-1.99x, GRU 1.96-2.18x at
// H = 64-1024; 1.8 ns a unit of the LSTM at H = 192). Paired, process CPU
// time, 9 alternating rounds, 2026-11-27 12:16 UTC, load 3.2-4.2, AMD
// EPYC (Zen 4, 2 vCPUs):
//
//	go test -c -tags noavx512 -o avx2.test ./internal/f32/
//	go test -c -o avx512.test ./internal/f32/
//	python3 scripts/ab_bench.py avx2.test avx512.test --metric cpu-ns/op \
//	    --bench 'BenchmarkLSTMGates|BenchmarkGRUGates' --rounds 9 --benchtime 200ms
//
// # bf16
//
// A bf16 value is the high 16 bits of a float32 (8 exponent bits, 7
// mantissa bits), so it widens to float32 exactly by a shift. ToBF16
// rounds to nearest even. GemmNTBF16 reads bf16 weights and computes in
// float32: half the bytes streamed for a relative weight error of at most
// 2^-9. Its kernels widen without shuffles: a 256-bit load holds sixteen
// weights, lane i holding weights 2i (low half) and 2i+1 (high half), so
// a shift left by 16 gives the even ones as float32 and a mask the odd
// ones, against x split once per tile into its even and odd values.
//
// With AVX512_BF16, VDPBF16PS multiplies bf16 pairs and adds both
// products to a float32 lane, 32 columns an instruction. x must be bf16
// too, so each row of A is split into hi (its top 16 bits) and lo (the
// rest, rounded to bf16), hi + lo within 2^-16 of x, and W goes through
// both: the weights keep their 2^-9, x nearly all of its precision. The
// order of the sums differs from the other path's, so the two agree to
// rounding, not bit for bit.
package f32
