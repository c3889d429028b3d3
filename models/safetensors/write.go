package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Write writes tensors and metadata to w as one safetensors file. The data
// are laid out in name order whatever the order of tensors; metadata keys
// are written sorted, and no "__metadata__" entry is written when metadata
// is empty. The header is padded with spaces to a multiple of eight bytes.
//
// Write validates the tensors as Read would (unique names, known dtypes,
// data lengths that match the shapes) and writes nothing if they are
// invalid. Errors from w are wrapped.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	header, order, err := encodeHeader(tensors, metadata)
	if err != nil {
		return err
	}
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(header)))
	if _, err := w.Write(prefix[:]); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	if _, err := w.Write(header); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	for _, t := range order {
		var err error
		if t.Data == nil && t.Section != nil {
			_, err = io.Copy(w, io.NewSectionReader(t.Section, 0, t.Section.Size()))
		} else {
			_, err = w.Write(t.Data)
		}
		if err != nil {
			return fmt.Errorf("safetensors: write %q: %w", t.Name, err)
		}
	}
	return nil
}

// encodeHeader validates the tensors and returns the padded header and the
// tensors in the order of their data.
func encodeHeader(tensors []Tensor, metadata map[string]string) ([]byte, []*Tensor, error) {
	order := make([]*Tensor, len(tensors))
	for i := range tensors {
		order[i] = &tensors[i]
	}
	slices.SortFunc(order, func(a, b *Tensor) int { return strings.Compare(a.Name, b.Name) })

	var buf bytes.Buffer
	buf.WriteByte('{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k, v := range metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, nil, fmt.Errorf("%w: metadata key %q: not valid UTF-8", ErrHeader, k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		writeJSONString(&buf, metadataKey)
		buf.WriteString(":{")
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSONString(&buf, k)
			buf.WriteByte(':')
			writeJSONString(&buf, metadata[k])
		}
		buf.WriteByte('}')
	}

	var offset uint64
	for i, t := range order {
		switch {
		case i > 0 && t.Name == order[i-1].Name:
			return nil, nil, &TensorError{t.Name, ErrDuplicate}
		case t.Name == metadataKey:
			return nil, nil, &TensorError{t.Name, fmt.Errorf("%w: reserved name", ErrHeader)}
		case !utf8.ValidString(t.Name):
			return nil, nil, &TensorError{t.Name, fmt.Errorf("%w: name is not valid UTF-8", ErrHeader)}
		}
		if _, err := t.checkSize(); err != nil {
			return nil, nil, err
		}
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		writeJSONString(&buf, t.Name)
		buf.WriteString(`:{"dtype":`)
		writeJSONString(&buf, string(t.DType))
		buf.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(strconv.Itoa(d))
		}
		end := offset + uint64(t.ByteSize())
		fmt.Fprintf(&buf, `],"data_offsets":[%d,%d]}`, offset, end)
		offset = end
	}
	buf.WriteByte('}')
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	if buf.Len() > MaxHeaderSize {
		return nil, nil, fmt.Errorf("%w: %d bytes, limit %d", ErrHeaderTooLarge, buf.Len(), MaxHeaderSize)
	}
	return buf.Bytes(), order, nil
}

// writeJSONString writes s, which must be valid UTF-8, as a JSON string.
func writeJSONString(buf *bytes.Buffer, s string) {
	b, err := json.Marshal(s)
	if err != nil {
		panic("safetensors: cannot happen: marshal string: " + err.Error())
	}
	buf.Write(b)
}
