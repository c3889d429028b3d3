package schedule

import "sync"

// Deprecated: DefaultPool goes away once the server owns its pools; do not use it in new code.
var (
	defaultPoolsMu sync.Mutex
	defaultPools   = map[int]*Pool{}
)

// DefaultPool returns the process-wide pool of n pinned workers, starting
// it on first use. It is never closed: it is for programs that do not
// manage a Pool of their own (NewProgram with Partitioned). It returns an
// error if n exceeds GOMAXPROCS.
func DefaultPool(n int) (*Pool, error) {
	defaultPoolsMu.Lock()
	defer defaultPoolsMu.Unlock()
	if p, ok := defaultPools[n]; ok {
		return p, nil
	}
	p, err := NewPool(PoolOptions{Workers: n})
	if err != nil {
		return nil, err
	}
	defaultPools[n] = p
	return p, nil
}
