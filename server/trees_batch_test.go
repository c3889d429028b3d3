package server

import (
	"testing"

	"rnnserve/schedule"
)

// TestTreeBatchNodes: a plan holds schedule.MaxTreeBatchNodes nodes, so
// two requests that each fit are not put in one batch past it (its plan
// would refuse both).
func TestTreeBatchNodes(t *testing.T) {
	b := &treeBatch{max: 64}
	half := schedule.MaxTreeBatchNodes/2 + 1
	j := func(nodes int) *job[*treeWork] { return &job[*treeWork]{rows: 1, work: &treeWork{nodes: nodes}} }
	if !b.fits(j(half)) {
		t.Fatal("an empty batch refused a request")
	}
	b.add(j(half))
	if b.fits(j(half)) {
		t.Errorf("two requests of %d nodes put together past %d", half, schedule.MaxTreeBatchNodes)
	}
	if !b.fits(j(schedule.MaxTreeBatchNodes - half)) {
		t.Errorf("a request that leaves the batch at the limit refused")
	}
}
