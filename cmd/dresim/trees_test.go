package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestTreesCommand(t *testing.T) {
	var out, errs bytes.Buffer
	if err := dispatch([]string{"trees", "-cache", "1MiB", "-runs", "3", "-vocab", "100"}, noEnv, &out, &errs); err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	for _, want := range []string{"| balanced | 1 |", "| linear | 25 |", "recursive", "depth_batched"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := dispatch([]string{"trees", "-json", "-cell", "tree_rnn", "-runs", "2", "-vocab", "50", "-hidden", "8"}, noEnv, &out, &errs); err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Shape string  `json:"shape"`
		DRE   float64 `json:"dre"`
	}
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 18 || rows[0].DRE <= 0 {
		t.Errorf("JSON rows: %d, %v", len(rows), err)
	}
	for _, bad := range [][]string{{"trees", "-cell", "lstm"}, {"trees", "-cache", "0"}, {"trees", "extra"}} {
		if err := dispatch(bad, noEnv, &out, &errs); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
