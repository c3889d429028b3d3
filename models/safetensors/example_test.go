package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log"

	"rnnserve/models/safetensors"
)

func Example() {
	var buf bytes.Buffer
	err := safetensors.Write(&buf, []safetensors.Tensor{
		safetensors.FromFloat32("rnn.bias_ih_l0", []int{2, 2}, []float32{0.5, -1, 2, 0}),
		safetensors.FromInt64("tokens", []int{3}, []int64{7, 0, 59}),
	}, map[string]string{"format": "pt"})
	if err != nil {
		log.Fatal(err)
	}

	f, err := safetensors.Read(buf.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(f.Metadata["format"], f.Names())
	bias, _ := f.Tensor("rnn.bias_ih_l0")
	v, err := bias.Float32s()
	fmt.Println(bias.DType, bias.Shape, v, err)

	// A corrupted header length is reported, not trusted.
	data := buf.Bytes()
	binary.LittleEndian.PutUint64(data, 1000)
	_, err = safetensors.Read(data)
	fmt.Println(err)
	// Output:
	// pt [rnn.bias_ih_l0 tokens]
	// F32 [2 2] [0.5 -1 2 0] <nil>
	// safetensors: file truncated: header length 1000 but only 208 bytes follow
}
