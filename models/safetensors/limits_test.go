package safetensors

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// TestLimits: a header of MaxHeaderSize bytes passes the size check (the
// file here is then too short for it) and one byte more is refused by
// it; a value in an unknown field nested maxJSONDepth deep is skipped and
// one nested a level deeper refused.
func TestLimits(t *testing.T) {
	length := func(n uint64) []byte { return append(binary.LittleEndian.AppendUint64(nil, n), "{}"...) }
	if _, err := Read(length(MaxHeaderSize)); !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "header length 100000000 but only 2 bytes follow") {
		t.Errorf("a header of MaxHeaderSize bytes: %v, want ErrTruncated", err)
	}
	if _, err := Read(length(MaxHeaderSize + 1)); !errors.Is(err, ErrHeaderTooLarge) || !strings.Contains(err.Error(), "100000001 bytes, limit 100000000 (MaxHeaderSize)") {
		t.Errorf("a header of MaxHeaderSize+1 bytes: %v, want ErrHeaderTooLarge", err)
	}

	nested := func(depth int) []byte {
		v := strings.Repeat(`{"k":[`, depth/2) + strings.Repeat("[", depth%2) + "0" + strings.Repeat("]", depth%2) + strings.Repeat("]}", depth/2)
		return file(`{"w":{"x":`+v+`,"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4))
	}
	if f, err := Read(nested(maxJSONDepth)); err != nil || len(f.Names()) != 1 {
		t.Errorf("a value nested %d deep: %v", maxJSONDepth, err)
	}
	if _, err := Read(nested(maxJSONDepth + 1)); !errors.Is(err, ErrHeader) || !strings.Contains(err.Error(), "a value nested more than 64 deep") {
		t.Errorf("a value nested %d deep: %v, want ErrHeader", maxJSONDepth+1, err)
	}
}
