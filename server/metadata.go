package server

import (
	"go.yaml.in/yaml/v3"

	"rnnserve/server/api"
	"rnnserve/server/internal/choice"
)

// seqMetadata describes a sequence model for GET /v2/models/{name};
// reason is why its load chose the schedule it did.
func seqMetadata(m *seqModel, sched choice.Candidate, reason string, traffic []api.ScheduleTraffic) api.ModelMetadata {
	n := m.net
	md := api.ModelMetadata{Name: m.name, Versions: []string{version}, Platform: "rnnserve_" + n.Cell.String()}
	md.Inputs, md.Outputs = m.names.metadata(n)
	wide := 0
	if w := m.form.Load().wide; w != nil {
		wide = w.Workers()
	}
	md.RNN = api.RNNMetadata{
		Cell: n.Cell.String(), InputSize: n.Input, HiddenSize: n.Hidden, NumLayers: n.NumLayers,
		Bidirectional: n.Bidirectional, ProjSize: n.Proj, VocabSize: n.Vocab, HeadSize: n.HeadOut,
		WeightBytes: n.WeightBytes(), Schedule: sched.String(), ScheduleReason: reason, WideCores: wide,
		Batching: m.batching, Traffic: traffic,
	}
	if n.HeadOut > 0 {
		md.RNN.Activation, md.RNN.HeadInput = n.Activation.String(), n.HeadInput.String()
	}
	if !n.Uniform() {
		// A mixed stack: cell, sizes and direction above are the last
		// layer's; every layer's are here.
		for _, l := range n.Stack() {
			md.RNN.Layers = append(md.RNN.Layers, api.LayerMetadata{Cell: l.Cell.String(), HiddenSize: l.Hidden, ProjSize: l.Proj, Bidirectional: l.Bidirectional})
		}
	}
	return md
}

// treeMetadata describes a tree model.
func treeMetadata(m *treeModel) api.ModelMetadata {
	n := m.tm.Net
	C := int64(n.Classes)
	return api.ModelMetadata{Name: m.name, Versions: []string{version}, Platform: "rnnserve_tree_" + n.Cell.String(),
		Inputs: []api.TensorMetadata{{Name: "trees", Datatype: "BYTES", Shape: []int64{-1},
			Doc: "one tree per element: bracketed, (3 (2 It) (4 (2 is) (3 good))), or JSON, {\"label\": 3, \"children\": [...]}; request parameter executor: recursive | depth_batched"}},
		Outputs: []api.TensorMetadata{
			{Name: "probs", Datatype: "FP32", Shape: []int64{-1, C}, Doc: treeOutputNames["probs"]},
			{Name: "class", Datatype: "INT64", Shape: []int64{-1}, Doc: treeOutputNames["class"]},
			{Name: "node_probs", Datatype: "FP32", Shape: []int64{-1, C}, Doc: treeOutputNames["node_probs"]},
			{Name: "nodes", Datatype: "INT64", Shape: []int64{-1}, Doc: treeOutputNames["nodes"]}},
		RNN: api.RNNMetadata{Cell: n.Cell.String(), InputSize: n.Embed, HiddenSize: n.Hidden, NumLayers: 1,
			VocabSize: n.Vocab, HeadSize: n.Classes, Activation: "softmax", WeightBytes: n.WeightBytes(),
			Schedule: m.exec.String(), ScheduleReason: "executor from model.yaml (default recursive)", Batching: true}}
}

// configType is Triton's model-configuration name of a KServe datatype.
func configType(dt string) string {
	if dt == "BYTES" {
		return "TYPE_STRING"
	}
	return "TYPE_" + dt
}

// configTensors turns metadata tensors into configuration tensors: the
// batch dimension (the first) leaves the dims; a tensor with no other
// dimension is [1] reshaped to a scalar, as Triton writes it.
func configTensors(ts []api.TensorMetadata) []api.ConfigTensor {
	out := make([]api.ConfigTensor, len(ts))
	for i, t := range ts {
		out[i] = api.ConfigTensor{Name: t.Name, DataType: configType(t.Datatype), Dims: t.Shape[1:]}
		if len(out[i].Dims) == 0 {
			out[i].Dims, out[i].Reshape = []int64{1}, &api.Reshape{Shape: []int64{}}
		}
	}
	return out
}

// fullTensors are configuration tensors with every dimension in the
// dims, for a model whose max_batch_size is 0.
func fullTensors(ts []api.TensorMetadata) []api.ConfigTensor {
	out := make([]api.ConfigTensor, len(ts))
	for i, t := range ts {
		out[i] = api.ConfigTensor{Name: t.Name, DataType: configType(t.Datatype), Dims: t.Shape}
	}
	return out
}

// baseConfig is the configuration every model kind shares.
func baseConfig(b *modelBase, kind string, o *Options, spec any) api.ModelConfig {
	return api.ModelConfig{Name: b.name, Platform: b.meta.Platform, Backend: "rnnserve", MaxBatchSize: o.MaxRequestRows,
		Input: configTensors(b.meta.Inputs), Output: configTensors(b.meta.Outputs),
		InstanceGroup: []api.InstanceGroup{{Count: cap(b.cores), Kind: "KIND_CPU"}},
		RNNServe:      api.ConfigRNNServe{Kind: kind, Spec: asMap(spec), Config: asMap(b.entry.Config)},
		Parameters:    factParameters(b.meta.RNN, api.ConfigRNNServe{Kind: kind, Spec: asMap(spec), Config: asMap(b.entry.Config)})}
}

// seqConfig is a sequence model's configuration in Triton's schema.
func seqConfig(m *seqModel, o *Options) api.ModelConfig {
	// Triton's scheduling_choice is a oneof: a model that keeps sequences
	// has sequence_batching (whether its infer requests are batched is in
	// the metadata's rnn.cellular_batching).
	c := baseConfig(&m.modelBase, "sequence", o, m.entry.Model.Spec)
	if !m.names.batchFirst() {
		// Some tensor's batch axis is not its first (a time-major input,
		// h_n as PyTorch lays it out, rows of T*B): Triton's schema says
		// so with max_batch_size 0 and every dimension in the dims.
		c.MaxBatchSize = 0
		c.Input, c.Output = fullTensors(m.meta.Inputs), fullTensors(m.meta.Outputs)
	}
	for i := range c.Input {
		c.Input[i].Optional = c.Input[i].Name == "lengths"
	}
	c.SequenceBatching = &api.SequenceBatching{MaxSequenceIdleMicroseconds: uint64(o.Sequences.IdleTimeout.Microseconds())}
	return c
}

// treeConfig is a tree model's configuration in Triton's schema.
func treeConfig(m *treeModel, o *Options) api.ModelConfig {
	c := baseConfig(&m.modelBase, "tree", o, m.tm.Spec)
	c.DynamicBatching = &api.DynamicBatching{MaxQueueDelayMicroseconds: uint64(o.Batching.MaxQueueDelay.Microseconds())}
	return c
}

// asMap turns a YAML-tagged struct into the object its YAML form is, for
// JSON output under the YAML keys.
func asMap(v any) map[string]any {
	out := map[string]any{}
	data, err := yaml.Marshal(v)
	if err != nil {
		return out
	}
	yaml.Unmarshal(data, &out)
	return out
}
