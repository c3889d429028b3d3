package tree

import "fmt"

// Vocab maps words to ids: the rows of a model's embedding. Unknown words
// map to the UNK id when the vocabulary has one; otherwise they are an
// error (ErrUnknownWord).
type Vocab struct {
	words []string
	index map[string]int32
	unk   int32 // -1: none
}

// NewVocab makes a vocabulary of words (id = position). unk, when not
// empty, names the word unknown words map to; it must be in words.
func NewVocab(words []string, unk string) (*Vocab, error) {
	if len(words) == 0 || len(words) > MaxNodesLimit {
		return nil, fmt.Errorf("tree: vocabulary of %d words, want 1..%d", len(words), MaxNodesLimit)
	}
	v := &Vocab{words: append([]string(nil), words...), index: make(map[string]int32, len(words)), unk: -1}
	for i, w := range words {
		if _, dup := v.index[w]; dup {
			return nil, fmt.Errorf("tree: word %q twice in the vocabulary (ids %d and %d)", w, v.index[w], i)
		}
		v.index[w] = int32(i)
	}
	if unk != "" {
		id, ok := v.index[unk]
		if !ok {
			return nil, fmt.Errorf("tree: UNK word %q is not in the vocabulary", unk)
		}
		v.unk = id
	}
	return v, nil
}

// Len is the number of words.
func (v *Vocab) Len() int { return len(v.words) }

// Word returns the word of id.
func (v *Vocab) Word(id int32) string { return v.words[id] }

// UNK returns the id unknown words map to, and false if there is none.
func (v *Vocab) UNK() (int32, bool) { return v.unk, v.unk >= 0 }

// ID returns the id of w: its own, else the UNK id. ok is false when w is
// unknown and there is no UNK.
func (v *Vocab) ID(w string) (id int32, ok bool) {
	if id, ok := v.index[w]; ok {
		return id, true
	}
	return v.unk, v.unk >= 0
}
