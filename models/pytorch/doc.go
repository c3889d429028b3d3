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
// The pickles are decoded by github.com/nlpodyssey/gopickle's Unpickler, a
// Go interpreter of the pickle opcodes that never runs Python. The classes
// a pickle names are resolved by an allow list of what a state_dict needs
// and nothing else:
//
//	collections.OrderedDict
//	torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter
//	torch.{Float,Half,BFloat16,Double,Long,Int,Short,Char,Byte,Bool}Storage
//
// Any other class is refused with a *ClassError naming it (a whole module
// saved with torch.save(model) names the user's own class, for example).
// gopickle resolves a few built-in names itself (builtins.list and dict,
// __builtin__.object, copy_reg._reconstructor, array._array_reconstructor)
// to inert Go values; Read refuses them too if they appear anywhere in the
// object it extracts tensors from.
//
// Two things are checked before gopickle sees a pickle, because the
// library does not: every length an opcode declares must fit in the bytes
// that follow (gopickle allocates a declared length before reading it, so
// a forged length could ask for exabytes), and the stream must end with
// STOP. Malformed pickles on which gopickle panics (for example an odd
// number of items for SETITEMS) are turned into errors matching
// ErrCorrupt. A tensor must lie inside its storage and hold no more
// elements than the storage, so a file cannot expand into more memory than
// it occupies.
//
// # What is returned
//
// Read returns the tensors of the top-level dict (a state_dict), or of
// the one nested dict of tensors under "state_dict", "model_state_dict",
// "model" or "module" in a training checkpoint whose top level holds
// other things too. Each tensor is copied out in row-major order as a
// safetensors.Tensor (dtype names as safetensors spells them: F32, F16,
// BF16, F64, I64, ...), whatever its strides in the file.
package pytorch
