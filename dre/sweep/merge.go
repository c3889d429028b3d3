package sweep

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrMerge is wrapped by every error about shards that cannot be merged.
var ErrMerge = errors.New("dresim: merge")

// Merge joins the output directories of shards of one sweep into one
// result: it checks that they come from the same sweep (fingerprint) and
// that no row appears twice, and, unless partial is set, that together
// they hold every row.
func Merge(dirs []string, partial bool) (*Results, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%w: no directories", ErrMerge)
	}
	var first *Manifest
	var rows []Row
	seen := map[int]string{}
	shards := map[int]string{}
	for _, dir := range dirs {
		m, rs, err := ReadOutput(dir) // every row's index inside the sweep
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMerge, err)
		}
		if first == nil {
			first = m
		} else if m.Fingerprint != first.Fingerprint {
			return nil, fmt.Errorf("%w: %s holds sweep %q (fingerprint %s), %s holds %q (%s)",
				ErrMerge, dir, m.Sweep.Name, m.Fingerprint, dirs[0], first.Sweep.Name, first.Fingerprint)
		}
		if m.Shard != nil {
			if first.Shard == nil || m.Shard.N != first.Shard.N {
				return nil, fmt.Errorf("%w: %s is shard %v, %s is %v", ErrMerge, dir, m.Shard, dirs[0], shardName(first.Shard))
			}
			if other, ok := shards[m.Shard.K]; ok {
				return nil, fmt.Errorf("%w: %s and %s are both shard %v", ErrMerge, other, dir, m.Shard)
			}
			shards[m.Shard.K] = dir
		}
		for _, r := range rs {
			if other, ok := seen[r.Index]; ok {
				return nil, fmt.Errorf("%w: row %d is in %s and in %s", ErrMerge, r.Index, other, dir)
			}
			seen[r.Index] = dir
		}
		rows = append(rows, rs...)
	}
	slices.SortFunc(rows, func(a, b Row) int { return a.Index - b.Index })
	if missing := first.TotalRows - int64(len(rows)); missing > 0 && !partial {
		var idx []string
		for i, j := 0, 0; i < int(first.TotalRows) && len(idx) < 10; i++ {
			if j < len(rows) && rows[j].Index == i {
				j++
				continue
			}
			idx = append(idx, fmt.Sprint(i))
		}
		return nil, fmt.Errorf("%w: %d of the sweep's %d rows are missing (rows %s...); merge every shard, or pass -partial",
			ErrMerge, missing, first.TotalRows, strings.Join(idx, ", "))
	}
	m := *first
	m.Shard, m.ShardRows, m.Started = nil, m.TotalRows, now()
	return &Results{Manifest: m, Complete: int64(len(rows)) == m.TotalRows, Rows: rows}, nil
}

func shardName(s *Shard) string {
	if s == nil {
		return "the whole sweep"
	}
	return s.String()
}
