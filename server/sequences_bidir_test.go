package server

import (
	"net/http"
	"strings"
	"testing"
)

// TestSequenceBidirectional: a bidirectional model's reverse direction
// starts at the last step of what it is given, so a sequence sent in
// pieces would not give the whole input's result: sequence parameters on
// it are a 400, and the model serves whole requests on.
func TestSequenceBidirectional(t *testing.T) {
	_, ts := newTestServer(t, nil, true)
	body := `{"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 2, 3], "data": [1, 2, 3, 4, 5, 6]}]`
	code, out, _ := post(t, ts.URL+"/v2/models/bi/infer", body+`, "parameters": {"sequence_id": "a", "sequence_start": true}}`)
	if code != http.StatusBadRequest || !strings.Contains(string(out), "bidirectional") {
		t.Errorf("a sequence on a bidirectional model: %d %s, want 400 saying why", code, out)
	}
	if code, out, _ := post(t, ts.URL+"/v2/models/bi/infer", body+`}`); code != http.StatusOK {
		t.Errorf("a whole request after it: %d %s", code, out)
	}
}
