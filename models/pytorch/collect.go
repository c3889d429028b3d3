package pytorch

import (
	"fmt"
	"slices"
	"strings"

	"rnnserve/models/safetensors"
)

// nestedKeys are where training checkpoints keep the model's state_dict.
var nestedKeys = []string{"state_dict", "model_state_dict", "model", "module"}

// maxNesting bounds how deep collect looks for a state_dict nested under
// nestedKeys: a training checkpoint nests it once or twice (Lightning's
// {"state_dict": ...}, a wrapper's {"model": {"module": ...}}).
const maxNesting = 4

// collect extracts the tensors of a state_dict, or of the state_dict
// nested in a training checkpoint. It follows at most maxNesting dicts
// and never recurses into values, so a pickle whose values share or
// contain themselves cannot make it loop or run deep.
func collect(obj any, fileSize int64) (*File, error) {
	d, ok := obj.(*dict)
	if !ok {
		return nil, fmt.Errorf("%w: the file holds %s, want a dict of tensors (save model.state_dict())", ErrContent, summary(obj))
	}
	// A dict of tensors only is the state_dict; a checkpoint that holds
	// other things too keeps it under one of nestedKeys.
	for depth := 0; depth < maxNesting && !allTensors(d.values); depth++ {
		inner := nestedDict(d)
		if inner == nil {
			break
		}
		d = inner
	}
	hasTensor := slices.ContainsFunc(d.values, isTensor)
	f := &File{tensors: make(map[string]*safetensors.Tensor, len(d.keys))}
	var claimed int64
	for i, k := range d.keys {
		name, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("%w: a key of the dict is %s, want a str", ErrContent, summary(k))
		}
		t, ok := d.values[i].(*tensor)
		if !ok {
			if !hasTensor {
				return nil, fmt.Errorf("%w: the dict holds no tensors (keys %s); save model.state_dict(), or a dict with the state_dict under one of %q",
					ErrContent, keyList(d.keys), nestedKeys)
			}
			return nil, fmt.Errorf("%w: %q is %s, not a tensor", ErrContent, clipName(name), summary(d.values[i]))
		}
		if _, dup := f.tensors[name]; dup {
			return nil, fmt.Errorf("%w: tensor %q twice", ErrContent, clipName(name))
		}
		claimed += t.claim() + tensorEntryBytes
		if limit := MaxTensorBytesPerFileByte * fileSize; claimed > limit {
			return nil, fmt.Errorf("%w: the tensors claim more than %d bytes, %d times the file's %d bytes (MaxTensorBytesPerFileByte): each name sharing a storage claims it again, a view that is not contiguous claims the span of its storage it covers as well, and every tensor %d bytes for its entry",
				ErrTooLarge, limit, MaxTensorBytesPerFileByte, fileSize, tensorEntryBytes)
		}
		st, err := t.safetensor(name)
		if err != nil {
			return nil, err
		}
		f.tensors[name] = st
		f.names = append(f.names, name)
	}
	return f, nil
}

func isTensor(v any) bool { _, ok := v.(*tensor); return ok }

func allTensors(values []any) bool {
	return len(values) > 0 && !slices.ContainsFunc(values, func(v any) bool { return !isTensor(v) })
}

// nestedDict is the dict under the first of nestedKeys that d holds.
func nestedDict(d *dict) *dict {
	for _, want := range nestedKeys {
		for i, k := range d.keys {
			if k == want {
				if inner, ok := d.values[i].(*dict); ok {
					return inner
				}
			}
		}
	}
	return nil
}

// keyList names the first keys of a dict for a message.
func keyList(keys []any) string {
	var s []string
	for i, k := range keys {
		if i == 8 {
			s = append(s, fmt.Sprintf("and %d more", len(keys)-8))
			break
		}
		s = append(s, summary(k))
	}
	return "[" + strings.Join(s, " ") + "]"
}
