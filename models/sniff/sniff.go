package sniff

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"io"
	"path"
)

// Format is a kind of model file.
type Format uint8

const (
	Unknown Format = iota
	// Safetensors: an 8-byte little-endian header length, then a JSON object.
	Safetensors
	// TorchZip: torch.save's default format since PyTorch 1.6, a zip
	// archive holding <name>/data.pkl and one record per storage.
	TorchZip
	// TorchLegacy: torch.save(..., _use_new_zipfile_serialization=False),
	// pickles back to back starting with PyTorch's magic number.
	TorchLegacy
	// TorchScript: torch.jit.save's archive (code and constants.pkl), a
	// program rather than a state_dict.
	TorchScript
	// ONNX: a serialized onnx.ModelProto.
	ONNX
	// Zip: a zip archive of some other kind.
	Zip
	// Pickle: a Python pickle that is not a PyTorch checkpoint.
	Pickle
)

// String describes the format for an error message, as in "this is X".
func (f Format) String() string {
	switch f {
	case Safetensors:
		return "a safetensors file"
	case TorchZip:
		return "a PyTorch zip checkpoint (torch.save)"
	case TorchLegacy:
		return "a PyTorch legacy checkpoint (torch.save with _use_new_zipfile_serialization=False)"
	case TorchScript:
		return "a TorchScript archive (torch.jit.save), which holds a program, not a state_dict"
	case ONNX:
		return "an ONNX model"
	case Zip:
		return "a zip archive that is not a PyTorch checkpoint"
	case Pickle:
		return "a Python pickle that is not a PyTorch checkpoint"
	}
	return "a file of unknown format"
}

// Name is a short lower-case name of the format ("safetensors", "pytorch",
// "onnx", ...), for metadata.
func (f Format) Name() string {
	switch f {
	case Safetensors:
		return "safetensors"
	case TorchZip:
		return "pytorch"
	case TorchLegacy:
		return "pytorch-legacy"
	case TorchScript:
		return "torchscript"
	case ONNX:
		return "onnx"
	case Zip:
		return "zip"
	case Pickle:
		return "pickle"
	}
	return "unknown"
}

// legacyMagic is the pickled protocol-2 LONG1 of PyTorch's legacy magic
// number 0x1950a86a20f9469cfc6c, as the legacy format starts.
var legacyMagic = []byte{0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}

// HeadSize is how many bytes from the start of a file DetectAt reads:
// every format but zip shows itself in them.
const HeadSize = 64

// Detect returns the format of data.
func Detect(data []byte) Format { return DetectAt(bytes.NewReader(data), int64(len(data))) }

// DetectAt returns the format of the size bytes of r. It reads the first
// HeadSize bytes and, for a zip archive, the archive's central directory
// (as archive/zip does: the end record and the member headers it points
// to), never the rest: a file of gigabytes is told by its header.
func DetectAt(r io.ReaderAt, size int64) Format {
	head := make([]byte, min(size, HeadSize))
	if n, _ := r.ReadAt(head, 0); n < len(head) {
		head = head[:n]
		size = int64(n)
	}
	// Safetensors goes first: its header length is any number, and one
	// whose low bytes read 0x80 0x02 would look like a pickle.
	switch {
	case isSafetensors(head, size):
		return Safetensors
	case bytes.HasPrefix(head, []byte("PK\x03\x04")) || bytes.HasPrefix(head, []byte("PK\x05\x06")):
		return zipKind(r, size)
	case bytes.HasPrefix(head, legacyMagic):
		return TorchLegacy
	case len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5:
		return Pickle
	case isONNX(head):
		return ONNX
	}
	return Unknown
}

func zipKind(r io.ReaderAt, size int64) Format {
	z, err := zip.NewReader(r, size)
	if err != nil {
		return Zip
	}
	kind := Zip
	for _, f := range z.File {
		switch path.Base(f.Name) {
		case "constants.pkl":
			return TorchScript
		case "data.pkl":
			kind = TorchZip
		}
	}
	return kind
}

func isSafetensors(head []byte, size int64) bool {
	if len(head) < 10 {
		return false
	}
	n := binary.LittleEndian.Uint64(head)
	return n >= 2 && n <= uint64(size-8) && head[8] == '{'
}

// isONNX recognises the start of a serialized ModelProto as exporters
// write it: field 1 (ir_version, a small varint) first, then another
// ModelProto field with its proper wire type.
func isONNX(data []byte) bool {
	if len(data) < 4 || data[0] != 0x08 {
		return false
	}
	v, n := binary.Uvarint(data[1:])
	if n <= 0 || v == 0 || v > 100 || 1+n >= len(data) {
		return false
	}
	tag, m := binary.Uvarint(data[1+n:])
	if m <= 0 {
		return false
	}
	switch tag >> 3 {
	case 2, 3, 4, 6, 7, 8, 14, 20, 25: // strings and messages
		return tag&7 == 2
	case 5: // model_version
		return tag&7 == 0
	}
	return false
}
