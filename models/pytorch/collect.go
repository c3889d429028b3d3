package pytorch

import (
	"fmt"
	"slices"

	"github.com/nlpodyssey/gopickle/types"

	"rnnserve/models/safetensors"
)

// nestedKeys are where training checkpoints keep the model's state_dict.
var nestedKeys = []string{"state_dict", "model_state_dict", "model", "module"}

// entries lists a dict's (key, value) pairs in order, or ok=false.
func entries(v any) (keys []any, values []any, ok bool) {
	switch d := v.(type) {
	case *types.OrderedDict:
		for e := d.List.Front(); e != nil; e = e.Next() {
			entry := e.Value.(*types.OrderedDictEntry)
			keys = append(keys, entry.Key)
			values = append(values, entry.Value)
		}
		return keys, values, true
	case *types.Dict:
		for _, e := range *d {
			keys = append(keys, e.Key)
			values = append(values, e.Value)
		}
		return keys, values, true
	}
	return nil, nil, false
}

// collect extracts the tensors of a state_dict, or of the state_dict
// nested in a training checkpoint.
func collect(obj any) (*File, error) {
	keys, values, ok := entries(obj)
	if !ok {
		return nil, fmt.Errorf("%w: the file holds %s, want a dict of tensors (save model.state_dict())", ErrContent, describe(obj))
	}
	hasTensor := slices.ContainsFunc(values, func(v any) bool { _, ok := v.(*tensor); return ok })
	if !hasTensor {
		for _, want := range nestedKeys {
			for i, k := range keys {
				if k == want {
					if _, _, ok := entries(values[i]); ok {
						return collect(values[i])
					}
				}
			}
		}
	}
	f := &File{tensors: map[string]*safetensors.Tensor{}}
	for i, k := range keys {
		name, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("%w: a key of the dict is %s, want a str", ErrContent, describe(k))
		}
		t, ok := values[i].(*tensor)
		if !ok {
			if len(keys) > 0 && !hasTensor {
				return nil, fmt.Errorf("%w: the dict holds no tensors (keys %s); save model.state_dict(), or a dict with the state_dict under one of %q",
					ErrContent, keyList(keys), nestedKeys)
			}
			return nil, fmt.Errorf("%w: %q is %s, not a tensor", ErrContent, name, describe(values[i]))
		}
		if _, dup := f.tensors[name]; dup {
			return nil, fmt.Errorf("%w: tensor %q twice", ErrContent, name)
		}
		f.tensors[name] = &safetensors.Tensor{Name: name, DType: t.st.dtype, Shape: t.size, Data: t.bytes()}
		f.names = append(f.names, name)
	}
	return f, nil
}

func keyList(keys []any) string {
	var s []string
	for i, k := range keys {
		if i == 8 {
			s = append(s, "...")
			break
		}
		s = append(s, fmt.Sprintf("%v", k))
	}
	return fmt.Sprint(s)
}
