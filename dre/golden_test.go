package dre

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"rnnserve/cachesim"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

var update = flag.Bool("update", false, "rewrite the golden reports in testdata/")

// TestGoldenReports compares whole reports, as JSON, with testdata/*.json;
// go test ./dre/ -run TestGoldenReports -update rewrites them.
func TestGoldenReports(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  rnn.Config
		s    schedule.Schedule
		T, B int
		opt  Options
	}{
		{
			"lstm_embed_logsoftmax_A",
			rnn.Config{Cell: rnn.LSTM, Input: 32, Hidden: 64, Layers: 2, Vocab: 60, HeadOut: 60, Activation: rnn.ActLogSoftmax},
			schedule.A, 10, 1,
			Options{Cache: cachesim.Config{Size: 32 << 10}, OPT: true},
		},
		{
			"lstm_embed_logsoftmax_A+",
			rnn.Config{Cell: rnn.LSTM, Input: 32, Hidden: 64, Layers: 2, Vocab: 60, HeadOut: 60, Activation: rnn.ActLogSoftmax},
			schedule.APlus, 10, 1,
			Options{Cache: cachesim.Config{Size: 32 << 10}, OPT: true},
		},
		{
			"gru_bidir_b2_A_8way",
			rnn.Config{Cell: rnn.GRU, Input: 24, Hidden: 48, Layers: 2, Bidirectional: true},
			schedule.A, 6, 2,
			Options{Cache: cachesim.Config{Size: 16 << 10, Ways: 8}, OPT: true, OPTMaxAccesses: 1000, Runs: 20},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prog, p := dryPlan(t, tc.cfg, tc.s, tc.T, tc.B)
			r, err := Analyze(p, WorkingSetOfProgram(prog, p.T, p.B), tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", tc.name+".json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("report differs from %s (run with -update if the change is intended):\n%s", path, got)
			}
		})
	}
}
