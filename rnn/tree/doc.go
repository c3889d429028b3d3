// Package tree is the numeric core of rnnserve's tree-structured models:
// trees and their parsers, the tree cells' weights and float32 kernels.
// Like package rnn it does no I/O; plans and executors are in package
// schedule (TreeProgram), spec files and weights in package models
// (TreeSpec), traffic in dre/treetraffic.
//
// # Trees
//
// A Tree numbers its nodes in post-order (children left to right, then the
// node; the root last), the order every parser produces and the order
// per-node outputs are reported in. Three input forms: the bracketed form
// of the Penn and Stanford Sentiment treebanks (ParseBracketed, labels
// optional, PTB escapes undone), a nested JSON form (ParseJSON) and the
// parent-pointer form of the SST (FromParents, ParseParents). The parsers
// use explicit stacks, check Options' node and depth limits as they go and
// report errors with the byte offset (or node number) that matching
// sentinels (ErrSyntax, ErrLimit, ErrStructure, ErrUnknownWord, ErrLabel).
// Unknown words map to the vocabulary's UNK word when it has one.
//
// # Cells
//
// All weights are float32, row-major, in PyTorch's layout (y = W x is
// W [out][in]); the names are those of scripts/torch_tree.py's TreeModel.
// x is a node's word vector (the embedding row of its word), h_l, h_r the
// children's states:
//
//	TreeRNN (Socher et al. 2011)       leaf: h = x (E = H)
//	                                   inner: h = tanh(W [h_l; h_r] + b)
//	RNTN (Socher et al. 2013)          leaf: h = x
//	                                   inner: v = [h_l; h_r],
//	                                   h_k = tanh(vᵀ V[:, :, k] v + (W v + b)_k), V [2H][2H][H]
//	Binary TreeLSTM (Tai et al. 2015)  leaf: i, o, u = σ, σ, tanh of (W x + b);  c = i⊙u
//	                                   inner: i, f_l, f_r, o, u = σ,σ,σ,σ,tanh of (U [h_l; h_r] + b_U)
//	                                          c = i⊙u + f_l⊙c_l + f_r⊙c_r
//	                                   h = o⊙tanh(c)
//	Child-Sum TreeLSTM (Tai et al.)    h̃ = Σ_k h_k;  i, o, u = σ, σ, tanh of (W_iou x + b_iou + U_iou h̃)
//	                                   f_k = σ(W_f x + b_f + U_f h_k) for each child k
//	                                   c = i⊙u + Σ_k f_k⊙c_k,  h = o⊙tanh(c)   (x = 0 without a word)
//	classifier (every cell)            p = softmax(W_s h + b_s)
//
// The Binary TreeLSTM has a forget gate per child with its own weights for
// both children's states (the N-ary TreeLSTM with N = 2); its leaves read
// their word and inner nodes only their children, as in Tai et al.'s
// constituency trees. The top-down generator (TopDownLSTM, after Zhang, Lu
// and Lapata's TD-TreeLSTM) is described at schedule.TreeProgram.Generate.
//
// Products go through internal/f32's GemmNT, whose elements do not depend
// on the number of rows, and the gates through its float32 sigmoid and
// tanh; the pointwise kernels work on rows of n nodes at once, so the same
// code serves one node (recursive executor) and a whole height
// (depth-batched executor) with the same bits.
package tree
