package server

import (
	"encoding/json"

	"rnnserve/server/api"
)

// Model facts where the official protos carry them. rnnserve describes a
// model beyond KServe v2 in the metadata's rnn object (REST) and its
// configuration's rnnserve object; neither is a field of Triton's or
// KServe's protos, so a client generated from them would drop both. The
// model configuration's parameters map is one (Triton's model_config.proto,
// ModelConfig.parameters, string values): the same two objects go there
// as JSON, under "rnn" and "rnnserve", over REST and gRPC alike. The gRPC
// metadata's properties map (our own field 6 of ModelMetadataResponse)
// keeps "rnn" too, as an extra for clients built from our .proto.

// factParameters are a configuration's parameters: the metadata's rnn
// object and the configuration's rnnserve object, as JSON.
func factParameters(rnn api.RNNMetadata, own api.ConfigRNNServe) map[string]api.ModelParameter {
	out := map[string]api.ModelParameter{}
	if data, err := json.Marshal(rnn); err == nil {
		out["rnn"] = api.ModelParameter{StringValue: string(data)}
	}
	if data, err := json.Marshal(own); err == nil {
		out["rnnserve"] = api.ModelParameter{StringValue: string(data)}
	}
	return out
}
