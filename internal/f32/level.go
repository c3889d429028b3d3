package f32

// level is a kernel path: pure Go, AVX2 and FMA, or AVX-512 where the
// kernels have a form for it (avx512_amd64.go; the AVX512_BF16 products
// of GemmNTBF16). The kernels start at the highest level the host and the
// build allow; setLevel lowers them so that the tests and benchmarks run
// every path on one host.
type level int

const (
	levelGo level = iota
	levelAVX2
	levelAVX512
)

// hostLevel is the highest level this host and build run.
func hostLevel() level {
	switch {
	case hostAVX512:
		return levelAVX512
	case hostAVX2:
		return levelAVX2
	}
	return levelGo
}

// setLevel selects the kernels of level l, or of the highest below it
// that the host has.
func setLevel(l level) {
	useAsm = hostAVX2 && l >= levelAVX2
	useAVX512 = hostAVX512 && l >= levelAVX512
	useDPBF16 = hostBF16 && l >= levelAVX512
}

// levels lists the levels up to the host's: the paths the tests compare.
func levels() []level {
	var ls []level
	for l := levelGo; l <= hostLevel(); l++ {
		ls = append(ls, l)
	}
	return ls
}
