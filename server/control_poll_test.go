package server

import (
	"fmt"
	"strings"
	"testing"
)

// TestPollUnstampedFolder: a model folder with more files than a poll
// looks at cannot be seen to change; the poll says so, once, naming the
// model and the limit.
func TestPollUnstampedFolder(t *testing.T) {
	files := map[string]string{"a/model.yaml": lmSpec(8, 1)}
	for i := range 1100 {
		files[fmt.Sprintf("a/extra/f%d", i)] = ""
	}
	c := startControl(t, files, []string{"a"}, func(o *Options, _ *Deps) { o.ModelControlMode = ControlPoll })
	for range 3 {
		c.s.Poll()
	}
	const warning = `msg="repository poll: changes to a model folder are not seen" model=a`
	if n := strings.Count(c.log.String(), warning); n != 1 || !strings.Contains(c.log.String(), "more than 1024 files") {
		t.Errorf("%d warnings, want 1 naming the limit:\n%s", n, c.log)
	}
	if code, _ := get(t, c.rest+"/v2/models/a"); code != 200 {
		t.Errorf("model a after the polls: %d", code)
	}
}
