// Package safetensors reads and writes the safetensors tensor container,
// the format in which rnnserve receives model weights exported from PyTorch
// and in which the golden test vectors are stored.
//
// # Layout
//
// A file has three parts, one after the other:
//
//  1. Eight bytes: the length N of the header, an unsigned 64-bit integer
//     in little-endian byte order.
//  2. N bytes of UTF-8 JSON: one object that maps each tensor name to
//     {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}.
//     The optional key "__metadata__" holds an object of string values
//     instead of a tensor. Writers pad the JSON with trailing spaces so that
//     the data section starts at a multiple of eight bytes.
//  3. The data section: every tensor's elements in row-major (C) order and
//     little-endian byte order. Offsets count from the start of this
//     section, not from the start of the file, and end is exclusive.
//
// A well-formed file accounts for every byte: ordered by offset, the
// tensors tile the data section from its first byte to its last, with no
// gaps, no overlaps and nothing left over. Each tensor's byte length is
// exactly its element count (the product of its shape; 1 for the empty
// shape of a scalar) times the size of its dtype. Names are unique.
//
// # Reading and writing
//
// [Read] checks all of these rules and reports the first violation as an
// error that matches one of the package's sentinels with [errors.Is];
// problems that belong to one tensor come wrapped in a [*TensorError] that
// names it. Read never panics, whatever its input. Tensors returned by Read
// share memory with the input slice instead of copying it.
//
// [Write] lays tensors out in name order, which is also the order that
// scripts/torch_golden.py uses, so files written by either side compare
// byte for byte when their metadata match.
//
// Only dtypes whose elements are whole bytes are supported; the 4- and
// 6-bit floating-point types of recent revisions of the format are
// reported as [ErrDType].
package safetensors
