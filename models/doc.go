// Package models describes recurrent models on disk: a spec file (YAML, or
// JSON, which YAML reads too) that gives the shape, and an optional
// safetensors file of weights named as PyTorch's state_dict names them.
//
// The tensor names are those of a torch module with three attributes:
//
//	embedding  nn.Embedding(vocab_size, input_size)        embedding.weight
//	rnn        nn.LSTM / nn.GRU (bias=True, batch_first=False)
//	           rnn.weight_ih_l{k}[_reverse]  [G*H][In]
//	           rnn.weight_hh_l{k}[_reverse]  [G*H][Out]
//	           rnn.bias_ih_l{k}[_reverse]    [G*H]
//	           rnn.bias_hh_l{k}[_reverse]    [G*H]
//	           rnn.weight_hr_l{k}[_reverse]  [P][H]   (LSTM with proj_size P)
//	head       nn.Linear(dirs*Out, out_features)       head.weight, head.bias
//
// so `torch.save`-free export is `save_file(module.state_dict())`. A spec
// without a weights file means random weights from a fixed seed, for
// benchmarks and traffic sweeps of models nobody has trained.
package models
