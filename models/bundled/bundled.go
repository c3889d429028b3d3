// Package bundled embeds rnnserve's bundled model repository, so that the
// server runs a real model with no files beside the binary:
//
//	bytelm  a byte-level LSTM language model (embedding 48, 2 layers of
//	        192, head over 256 bytes) trained by scripts/train_bytelm.py on
//	        the licence texts in /usr/share/common-licenses; see
//	        bytelm/README.md.
//
// Each top-level directory of FS is one model (model.yaml and its weights).
package bundled

import "embed"

// FS is the bundled model repository.
//
//go:embed bytelm/model.yaml bytelm/model.safetensors
var FS embed.FS
