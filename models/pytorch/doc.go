// Package pytorch reads the tensors of a checkpoint written by torch.save,
// typically `torch.save(model.state_dict(), "model.pt")`, without Python
// and without running any code from the file.
//
// # Formats
//
// The zip format (torch.save's default since PyTorch 1.6: an archive with
// <name>/data.pkl, the pickled object, and <name>/data/<key>, one record of
// raw little-endian bytes per storage) and the legacy format
// (`_use_new_zipfile_serialization=False`: a magic-number pickle, a
// protocol-version pickle, a system-info pickle, the object's pickle, a
// pickle listing the storage keys, then each storage as an 8-byte element
// count and its bytes) are both read. TorchScript archives (torch.jit.save)
// are refused: they hold a program, not a state_dict.
//
// # Safety
//
// The pickles are decoded by this package's own unpickler (pickle.go), an
// interpreter of the pickle opcodes that never runs Python. The classes a
// pickle names are resolved by an allow list of what a state_dict needs
// and nothing else:
//
//	collections.OrderedDict
//	torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter
//	torch.{Float,Half,BFloat16,Double,Long,Int,Short,Char,Byte,Bool}Storage
//
// Any other class is refused with a *ClassError naming it (a whole module
// saved with torch.save(model) names the user's own class, for example).
// A few built-in names that pickles of old Python objects use
// (builtins.list and dict, __builtin__.object, copy_reg._reconstructor,
// array._array_reconstructor) build nothing; Read refuses what they
// build if it appears in the state_dict.
//
// The unpickler replaced github.com/nlpodyssey/gopickle because it can be
// bounded where gopickle cannot be from outside; it is stricter in each
// of these ways, and the tests show each on a file made for it
// (models/testdata/hostile, written by scripts/model_files.py):
//
//   - Memory is charged as values are made, before their bytes are held,
//     against a budget of PickleMemoryBase plus PickleMemoryPerByte per
//     byte of pickle. gopickle allocates a new stack for every MARK (about
//     240 bytes per byte of pickle), a map entry for every MEMOIZE and a
//     slice for every empty dict or list, without limit.
//   - A MARK is a position in the one stack; at most MaxPickleMarks are
//     open at once.
//   - Every length is checked against the bytes that follow before
//     anything is allocated for it (gopickle allocates a declared length
//     first, so a forged one asks for exabytes).
//   - Integers are at most MaxIntBytes long: no quadratic conversion of a
//     million decimal digits.
//   - A missing MARK, a stack underflow, an odd number of dict items, an
//     unset memo entry, an opcode torch.save never writes (INST, OBJ,
//     NEWOBJ, EXT*, PERSID, out-of-band buffers) are errors, not panics or
//     silently pushed nils.
//   - Errors describe a value by a bounded summary ("a tuple of 3
//     items"), never by printing it: a value may share itself
//     exponentially or contain itself, and gopickle's errors and types
//     print values whole.
//   - Nothing walks a decoded value recursively: finding the state_dict
//     follows at most a few nested dicts (maxNesting).
//
// Around the pickle, every length in the file is checked before it is
// trusted: zip records must be stored uncompressed (torch.save never
// compresses; a deflated record could inflate a small file) and lie
// inside the file; a storage must hold exactly the bytes its element
// count needs; a tensor must lie inside its storage and hold no more
// elements than it; and the tensors of the state_dict together may claim
// at most MaxTensorBytesPerFileByte times the file's size (names sharing
// a storage each claim it, and each tensor tensorEntryBytes for its
// entry), checked before anything is read for them. The pickles
// of a zip checkpoint (data.pkl) and of a legacy one (the five together)
// are at most MaxPickleBytes.
//
// Only the pickles are read into memory. A tensor's elements stay in the
// file until they are read straight into their final buffer
// (safetensors.Tensor.Float32sInto); a view that is not contiguous is
// gathered into memory at once, from the span of its storage it reads.
//
// # What is returned
//
// Read returns the tensors of the top-level dict (a state_dict), or of
// the one nested dict of tensors under "state_dict", "model_state_dict",
// "model" or "module" in a training checkpoint whose top level holds
// other things too. Each tensor is a safetensors.Tensor in row-major order
// (dtype names as safetensors spells them: F32, F16, BF16, F64, I64,
// ...), whatever its strides in the file.
package pytorch
