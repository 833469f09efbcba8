package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
	"github.com/sluicehq/sluice/throttle"
)

func TestMain(m *testing.M) {
	testenv.Main(m)
}

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is an injected clock: tests move it, never sleep.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type testBundle struct {
	clock *fakeClock
}

// setup returns a queue over a fresh schema with an injected clock at t0 and the given limits.
func setup(t *testing.T, limits ...throttle.Limit) (*store.Queue, *testBundle) {
	t.Helper()
	b := &testBundle{clock: &fakeClock{t: t0}}
	q := testdb.Engine(t, store.Options{Now: b.clock.Now})
	if len(limits) > 0 {
		require.NoError(t, q.UpsertLimits(context.Background(), limits...))
	}
	return q, b
}

func enqueue(t *testing.T, q *store.Queue, p store.EnqueueParams) store.Ticket {
	t.Helper()
	if p.Owner == "" {
		p.Owner = "owner-1"
	}
	tk, err := q.Enqueue(context.Background(), p)
	require.NoError(t, err)
	return tk
}

func claim(t *testing.T, q *store.Queue, p store.ClaimParams) store.ClaimResult {
	t.Helper()
	res, err := q.Claim(context.Background(), p)
	require.NoError(t, err)
	return res
}

func ids(ts []store.Ticket) []int64 {
	out := make([]int64, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func requireHealthy(t *testing.T, q *store.Queue) {
	t.Helper()
	problems, err := q.Verify(context.Background())
	require.NoError(t, err)
	require.Empty(t, problems)
}
