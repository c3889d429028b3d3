// Package bundled embeds rnnserve's bundled model repository, so that the
// server runs a real model with no files beside the binary:
//
//	bytelm    a byte-level LSTM language model (embedding 48, 2 layers of
//	          192, head over 256 bytes) trained by scripts/train_bytelm.py
//	          on the licence texts in /usr/share/common-licenses; see
//	          bytelm/README.md.
//	treelstm  a Binary TreeLSTM (embeddings 32, hidden 64, 10 classes)
//	          trained by scripts/torch_tree.py to give the value mod 10 of
//	          every sub-expression of arithmetic expression trees over
//	          digits with +, - and *; see treelstm/README.md.
//
// Each top-level directory of FS is one model (model.yaml and its
// weights); a tree model's spec says kind: tree.
package bundled

import "embed"

// FS is the bundled model repository.
//
//go:embed bytelm/model.yaml bytelm/model.safetensors treelstm/model.yaml treelstm/model.safetensors
var FS embed.FS
