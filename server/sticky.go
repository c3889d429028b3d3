package server

import "rnnserve/server/internal/infer"

// Sticky sequences: a sequence's state lives in the memory of the replica
// that served its first request, so with several replicas every request
// of the sequence must reach that replica. A load balancer cannot read
// sequence_id inside a JSON body or a protobuf message, so an infer
// request may also carry its sequence id in a request header (REST) or
// metadata (gRPC), which a consistent-hash balancer hashes on
// (docs/deploy.md has the recipes for nginx, Envoy and Istio).
//
// The header and the sequence_id parameter may both be given; they must
// then be the same text (an integer sequence_id compares as its decimal
// form). A request with only the header is part of the header's sequence:
// sequence_start and sequence_end in its parameters apply to it.

const (
	// SequenceHeader is the HTTP request header that carries an infer
	// request's sequence id.
	SequenceHeader = "X-Sequence-Id"
	// SequenceMetadata is the gRPC metadata key that carries it; for a
	// ModelStreamInfer stream it names the sequence of every request on
	// the stream.
	SequenceMetadata = "x-sequence-id"
)

// sequenceIDFrom reads a sequence id from the values a header (or a
// metadata key) was given; where names it in errors. No value is no id
// (""). A usable id is one value of 1 to infer.MaxSequenceID visible ASCII
// characters other than the comma (the separator proxies use to join
// repeated headers), and not "0", which the sequence_id parameter refuses
// too.
func sequenceIDFrom(values []string, where string) (string, error) {
	switch len(values) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", infer.BadRequest("%s given %d times: give it once", where, len(values))
	}
	id := values[0]
	switch {
	case id == "":
		return "", infer.BadRequest("%s is empty", where)
	case len(id) > infer.MaxSequenceID:
		return "", infer.BadRequest("%s is longer than %d bytes", where, infer.MaxSequenceID)
	case id == "0":
		return "", infer.BadRequest("%s is 0: a sequence id is a non-empty string or an unsigned integer other than 0", where)
	}
	for i := range len(id) {
		if c := id[i]; c <= ' ' || c > '~' || c == ',' {
			return "", infer.BadRequest("%s %q: byte %d is %q; an id there is visible ASCII without commas", where, infer.Clip(id), i, c)
		}
	}
	return id, nil
}

// withSequenceID decodes a request whose sequence id id came from outside
// its body (a header or metadata named by where; "" for none): r gets the
// id before decode runs, so that parameters with sequence_start and no
// sequence_id start sequence id, and a sequence_id parameter that differs
// from it is refused.
func withSequenceID(r *Request, id, where string, decode func() error) error {
	r.Sequence.ID = id
	if err := decode(); err != nil {
		return err
	}
	if id != "" && r.Sequence.ID != id {
		return infer.BadRequest("parameter sequence_id %q, but %s is %q: give the same id in both, or one of them", infer.Clip(r.Sequence.ID), where, infer.Clip(id))
	}
	return nil
}

// noSequenceID refuses a sequence id from a header or metadata on a
// request that cannot be part of a sequence (generation).
func noSequenceID(values []string, where string) error {
	if len(values) > 0 {
		return infer.BadRequest("%s on a generate request: generation keeps no sequence state", where)
	}
	return nil
}

// The names errors give the header and the metadata key.
const (
	sequenceHeaderName   = "header " + SequenceHeader
	sequenceMetadataName = "metadata " + SequenceMetadata
)
