package server

import (
	"errors"
	"rnnserve/server/internal/choice"
	"testing"
)

func TestPrivateCacheOption(t *testing.T) {
	for _, c := range []struct {
		v  int64
		ok bool
	}{{0, true}, {1 << 20, true}, {-1, false}, {1000, false}, {1 << 41, false}} {
		o := testOptions()
		o.PrivateCacheBytes = c.v
		o.EnsureDefaults()
		if err := o.Validate(); (err == nil) != c.ok || err != nil && !errors.Is(err, ErrOptions) {
			t.Errorf("private_cache_bytes %d: %v", c.v, err)
		}
	}
	if choice.PrivateOrDefault(0) != 1<<20 || choice.PrivateOrDefault(512<<10) != 512<<10 {
		t.Error("privateOrDefault")
	}
}
