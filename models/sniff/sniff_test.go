package sniff

import (
	"archive/zip"
	"bytes"
	"testing"
)

func zipOf(t *testing.T, names ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, n := range names {
		f, err := w.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("x"))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
		want Format
	}{
		{"empty", nil, Unknown},
		{"text", []byte("cell: lstm\n"), Unknown},
		{"safetensors", append([]byte{2, 0, 0, 0, 0, 0, 0, 0}, "{}"...), Safetensors},
		{"safetensors with a header of 0x280 bytes (0x80 0x02 first)", append(append([]byte{0x80, 0x02, 0, 0, 0, 0, 0, 0}, '{'), make([]byte, 0x280)...), Safetensors},
		{"safetensors with a header of 8 bytes (0x08 first)", append([]byte{8, 0, 0, 0, 0, 0, 0, 0}, "{}      "...), Safetensors},
		{"safetensors header past end", append([]byte{9, 0, 0, 0, 0, 0, 0, 0}, "{}"...), Unknown},
		{"torch zip", zipOf(t, "archive/data.pkl", "archive/data/0", "archive/version"), TorchZip},
		{"torchscript", zipOf(t, "m/data.pkl", "m/constants.pkl", "m/code/m.py"), TorchScript},
		{"other zip", zipOf(t, "a.txt"), Zip},
		{"broken zip", []byte("PK\x03\x04garbage"), Zip},
		{"legacy", append(append([]byte{}, legacyMagic...), '.'), TorchLegacy},
		{"pickle", []byte{0x80, 0x04, 0x95, 0, 0, 0, 0, 0, 0, 0, 0, '.'}, Pickle},
		{"onnx", []byte{0x08, 0x07, 0x12, 0x07, 'p', 'y', 't', 'o', 'r', 'c', 'h'}, ONNX},
		{"onnx bad wire type", []byte{0x08, 0x07, 0x10, 0x07}, Unknown},
	} {
		if got := Detect(c.data); got != c.want {
			t.Errorf("%s: Detect = %v, want %v", c.name, got, c.want)
		}
	}
	for f := Unknown; f <= Pickle; f++ {
		if f.String() == "" || f.Name() == "" {
			t.Errorf("format %d has no description", f)
		}
	}
}
