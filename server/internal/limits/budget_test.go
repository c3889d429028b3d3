package limits

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// newTestBudget is a budget of size bytes whose collectors are not
// registered.
func newTestBudget(size, maxBody int64, wait time.Duration) *Budget {
	return New(size, maxBody, wait, prometheus.NewGauge(prometheus.GaugeOpts{Name: "used"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"}))
}

// TestBudgetReservation checks the reservation's arithmetic directly: a
// request larger than the whole budget takes it all and no more, waits
// time out with ErrOverBudget, a canceled client gets its cause.
func TestBudgetReservation(t *testing.T) {
	used := prometheus.NewGauge(prometheus.GaugeOpts{Name: "used"})
	b := New(1000, 0, 20*time.Millisecond, used, prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"}))
	r := b.Reserve(context.Background())
	if err := r.Grow(5000); err != nil || r.held != 1000 {
		t.Fatalf("grow past the budget: held %d, %v; want the whole budget", r.held, err)
	}
	r2 := b.Reserve(context.Background())
	if err := r2.Grow(1); !isOverBudget(err) {
		t.Errorf("a full budget: %v, want ErrOverBudget", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	errCut := errors.New("cut")
	cancel(errCut)
	if err := b.Reserve(ctx).Grow(1); err != errCut {
		t.Errorf("a canceled request: %v, want its cause", err)
	}
	r.Release()
	r.Release() // twice is once
	if err := r2.Grow(1000); err != nil {
		t.Errorf("after release: %v", err)
	}
	r2.Release()
	if got := testutil.ToFloat64(used); got != 0 {
		t.Errorf("in use after releases: %v", got)
	}
	var charge []int64
	ch := &charged{r: bytes.NewReader(make([]byte, 3*Chunk+5)), res: &Reservation{b: newTestBudget(1<<30, 0, time.Second), ctx: context.Background(), deadline: time.Now().Add(time.Second)}}
	buf := make([]byte, Chunk/2)
	for {
		_, err := ch.Read(buf)
		charge = append(charge, ch.res.Held())
		if err != nil {
			break
		}
	}
	if last := charge[len(charge)-1]; last != 4*Chunk {
		t.Errorf("a %d-byte stream took %d bytes, want it rounded up to %d", 3*Chunk+5, last, 4*Chunk)
	}
}

func isOverBudget(err error) bool { return errors.Is(err, ErrOverBudget) }

// TestBudgetQueue: waiters are served first come, first served, except
// that a request already holding bytes goes ahead of new ones; a waiter
// that gives up lets the ones behind it through.
func TestBudgetQueue(t *testing.T) {
	b := newTestBudget(100, 0, time.Minute)
	ctx := context.Background()
	if err := b.Acquire(ctx, 90, TierNew, true); err != nil {
		t.Fatal(err)
	}
	got := map[string]chan error{}
	queued := func(n int) {
		for {
			b.mu.Lock()
			q := len(b.queue)
			b.mu.Unlock()
			if q == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait := func(name string, ctx context.Context, n int64, admitted bool) {
		done := make(chan error, 1)
		got[name] = done
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		tier := TierNew
		if admitted {
			tier = TierAdmitted
		}
		go func() { done <- b.Acquire(ctx, n, tier, true) }()
		queued(q + 1)
	}
	served := func(name string) bool {
		select {
		case err := <-got[name]:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	}
	wait("new 30", ctx, 30, false)
	wait("new 20", ctx, 20, false)
	wait("admitted 15", ctx, 15, true)
	b.Release(10) // 80 used: room for 15, not for 30
	if !served("admitted 15") || served("new 30") {
		t.Fatal("the admitted request did not go first")
	}
	b.Release(65) // 30 used: new 30 and new 20 in, 80 used
	if !served("new 30") || !served("new 20") {
		t.Fatal("the new waiters were not served in turn")
	}
	b.Release(0)
	if err := b.Acquire(ctx, 15, TierNew, true); err != nil { // 95 used
		t.Fatal(err)
	}
	// 95 used; a new waiter for 50 that gives up lets the 5 behind it in.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	wait("new 50", short, 50, false)
	wait("new 5", ctx, 5, false)
	if served("new 5") {
		t.Fatal("a later waiter passed the head of the queue")
	}
	if err := <-got["new 50"]; err == nil {
		t.Fatal("a wait past its deadline succeeded")
	}
	if !served("new 5") {
		t.Fatal("the waiter behind one that gave up is still waiting")
	}
	if b.InUse() != 100 {
		t.Errorf("in use %d, want 100", b.InUse())
	}
	b.Release(100)
	if b.InUse() != 0 {
		t.Errorf("in use %d after releasing all", b.InUse())
	}
}

// TestSmallShare: large requests cannot take the last eighth of the
// budget, so a small request is served at once while large ones hold
// everything else, and the large request that finds no room waits and is
// refused.
func TestSmallShare(t *testing.T) {
	const body = 64 << 10
	b := newTestBudget(64*body, body, time.Minute)
	if b.smallShare != 8*body {
		t.Fatalf("small share %d, want an eighth of the budget", b.smallShare)
	}
	large := b.Reserve(context.Background())
	if err := large.Grow(56 * body); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := b.Reserve(short).Grow(1); !isOverBudget(err) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a large request into the small share: %v, want a refusal", err)
	}
	small := b.Reserve(context.Background())
	small.Small = true
	for range 8 {
		if err := small.Grow(body / 8); err != nil {
			t.Fatalf("a small request with the large part full: %v", err)
		}
	}
	if small.held != body {
		t.Errorf("small request holds %d", small.held)
	}
	// Past SmallRequest it is large, and waits like one.
	late, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	small.ctx = late
	if err := small.Grow(1); err == nil {
		t.Errorf("a request past %d bytes took the small share", SmallRequest)
	}
	small.Release()
	large.Release()
	if b.InUse() != 0 {
		t.Errorf("in use %d after releasing all", b.InUse())
	}
}

// TestHand: bytes handed out of a reservation stay charged until their
// taker releases them, and the reservation's Release gives back only
// what it still holds.
func TestHand(t *testing.T) {
	b := newTestBudget(1000, 0, time.Second)
	r := b.Reserve(context.Background())
	if err := r.Grow(100); err != nil {
		t.Fatal(err)
	}
	if n := r.Hand(30); n != 30 || r.Held() != 70 {
		t.Fatalf("Hand(30) = %d, holding %d; want 30, 70", n, r.Held())
	}
	if n := r.Hand(500); n != 70 || r.Held() != 0 {
		t.Fatalf("Hand(500) = %d, holding %d; want 70, 0", n, r.Held())
	}
	r.Release()
	if b.InUse() != 100 {
		t.Errorf("in use %d after the reservation's release, want the 100 handed", b.InUse())
	}
	b.Release(100)
	if b.InUse() != 0 {
		t.Errorf("in use %d after the taker's release", b.InUse())
	}
}

// TestGrowWithRoom: a reservation that finds room takes it at once,
// without allocating (no waiter, channel or deadline timer), and behind a
// waiter it queues as before: the fast path only serves an empty queue.
func TestGrowWithRoom(t *testing.T) {
	b := newTestBudget(1000, 0, time.Second)
	r := b.Reserve(context.Background())
	allocs := testing.AllocsPerRun(100, func() {
		if err := r.Grow(10); err != nil {
			t.Fatal(err)
		}
		r.Settle(0)
	})
	if allocs != 0 {
		t.Errorf("Grow with room: %v allocations, want 0", allocs)
	}
	if b.InUse() != 0 {
		t.Fatalf("in use %d after settling, want 0", b.InUse())
	}
	// A large request waits for the whole budget; a new small one that
	// would fit the reserve queues behind it (its tier), not past it.
	big := b.Reserve(context.Background())
	if err := big.Grow(900); err != nil {
		t.Fatal(err)
	}
	waiter := b.Reserve(context.Background())
	waited := make(chan error)
	go func() { waited <- waiter.Grow(200) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		n := len(b.queue)
		b.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not queue")
		}
	}
	if b.take(50, false) {
		t.Error("take went past a queued waiter")
	}
	big.Release()
	if err := <-waited; err != nil {
		t.Errorf("the waiter: %v", err)
	}
	waiter.Release()
	if b.InUse() != 0 {
		t.Errorf("in use %d at the end, want 0", b.InUse())
	}
}
