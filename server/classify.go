package server

import (
	"cmp"
	"slices"
	"strconv"

	"rnnserve/server/internal/infer"
)

// checkClassification refuses classification counts out of range.
func checkClassification(outs []RequestedOutput) error {
	for _, o := range outs {
		if o.Classification < 0 || o.Classification > infer.MaxClassification {
			return infer.BadRequest("output %q: classification %d, want 1..%d", infer.Clip(o.Name), o.Classification, infer.MaxClassification)
		}
	}
	return nil
}

// classify replaces o by its k largest values along the last dimension,
// largest first (ties to the lower index), as BYTES elements
// "value:index": Triton's classification extension. A last dimension
// smaller than k gives all of its entries. Values print as Triton prints
// them: floats with six decimals.
func classify(o *OutputTensor, k int) error {
	if len(o.Shape) == 0 || o.Bytes != nil {
		return infer.BadRequest("output %q: classification needs a numeric tensor with at least one dimension", o.Name)
	}
	last := int(o.Shape[len(o.Shape)-1])
	k = min(k, last)
	n := len(o.Float32) + len(o.Int64)
	rows := 0
	if last > 0 {
		rows = n / last
	}
	out := make([][]byte, 0, rows*k)
	ids := make([]int64, k)
	order := make([]int, last)
	for r := range rows {
		if o.Float32 != nil {
			row := o.Float32[r*last : (r+1)*last]
			topK(order, func(a, b int) int { return cmp.Compare(row[b], row[a]) }, ids)
			for _, id := range ids {
				out = append(out, strconv.AppendInt(append(strconv.AppendFloat(nil, float64(row[id]), 'f', 6, 32), ':'), id, 10))
			}
			continue
		}
		row := o.Int64[r*last : (r+1)*last]
		topK(order, func(a, b int) int { return cmp.Compare(row[b], row[a]) }, ids)
		for _, id := range ids {
			out = append(out, strconv.AppendInt(append(strconv.AppendInt(nil, row[id], 10), ':'), id, 10))
		}
	}
	o.Shape = append(slices.Clone(o.Shape[:len(o.Shape)-1]), int64(k))
	o.Datatype, o.Bytes, o.Float32, o.Int64 = "BYTES", out, nil, nil
	return nil
}

// topK writes into ids the len(ids) indices that come first in the order
// byValue gives (ties to the lower index), using order as scratch.
func topK(order []int, byValue func(a, b int) int, ids []int64) {
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, byValue)
	for i := range ids {
		ids[i] = int64(order[i])
	}
}
