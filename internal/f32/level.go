package f32

// level is a kernel path: pure Go, AVX2 and FMA, or AVX-512 where the
// kernels have a form for it (avx512_amd64.go; the AVX512_BF16 products
// of GemmNTBF16). The kernels start at what the host runs best
// (setDefault); setLevel selects a level so that the tests and benchmarks
// run every path the host has.
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

// setDefault selects the kernels a process starts with.
func setDefault() {
	useAsm, useAVX512, useZProducts, useDPBF16 = hostAVX2, hostAVX512, hostAVX512 && wide512, hostBF16
}

// setLevel selects the kernels of level l, or of the highest below it
// that the host has; at levelAVX512 the AVX-512 products run even where
// they are not the default (wide512).
func setLevel(l level) {
	useAsm = hostAVX2 && l >= levelAVX2
	useAVX512 = hostAVX512 && l >= levelAVX512
	useZProducts = useAVX512
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
