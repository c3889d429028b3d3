// Package sniff tells what kind of model file a byte slice holds, from its
// first bytes and (for zip archives) its list of members, so that every
// reader can say what a file is when it is handed the wrong one ("this is
// a PyTorch zip checkpoint (torch.save), not a safetensors file") and the
// model loader can pick the reader by content rather than by file name.
//
// Detection reads only what it must: the magic bytes of each format and,
// for a zip archive, its central directory. It never fails; a file it does
// not recognise is Unknown.
package sniff
