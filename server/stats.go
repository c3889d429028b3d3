package server

import (
	"rnnserve/server/api"
)

// Statistics returns the statistics of model name (every model when name
// is empty) in the schema of Triton's statistics extension, with
// rnnserve's own figures under "rnnserve". ver, when set, must be the
// version served.
func (s *Server) Statistics(name, ver string) (*api.ModelStatsResponse, error) {
	var ms []model
	if name == "" {
		table := s.table()
		for _, n := range s.names() {
			ms = append(ms, table[n])
		}
	} else {
		m, err := s.lookup(name, ver)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	out := &api.ModelStatsResponse{ModelStats: []api.ModelStats{}}
	for _, m := range ms {
		out.ModelStats = append(out.ModelStats, statsOf(m))
	}
	return out, nil
}

// statsOf snapshots one model's statistics.
func statsOf(m model) api.ModelStats {
	b := m.base()
	st := &b.stats
	out := api.ModelStats{Name: b.name, Version: version,
		LastInference:  uint64(max(0, st.lastInference.Load())),
		InferenceCount: uint64(max(0, st.inferences.Load())),
		ExecutionCount: uint64(max(0, st.executions.Load())),
		InferenceStats: api.InferenceStats{Success: st.okDur.snapshot(), Fail: st.failDur.snapshot(),
			Queue: st.queue.snapshot(), ComputeInput: st.input.snapshot(),
			ComputeInfer: st.infer.snapshot(), ComputeOutput: st.output.snapshot()},
		BatchStats: []api.BatchStats{},
		RNNServe: api.RNNServeStats{Requests: st.requests.Load(), Success: st.success.Load(),
			Failed: st.failed.Load(), Rejected: st.rejected.Load(), Steps: st.steps.Load(), Tokens: st.tokens.Load(),
			InFlight: st.inflight.Load(), LiveSequences: b.seqs.count()},
	}
	if r := &out.RNNServe; r.Steps > 0 {
		r.MeanBatchRows = float64(r.Tokens) / float64(r.Steps)
	}
	out.RNNServe.QueueLength = m.queued()
	return out
}

// queued is the number of requests waiting for a lane or a core.
func (m *seqModel) queued() int { return m.batch.queued() + int(m.waiting.Load()) }

func (m *treeModel) queued() int { return m.batch.queued() }
