package models

func readONNX(data []byte, name string, read reader) (Tensors, error) {
	return nil, ErrFormat
}

type onnxModel struct {
	spec *Spec
	Tensors
}
